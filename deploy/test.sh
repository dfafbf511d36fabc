#!/usr/bin/env bash
# The test suite on a fresh machine: installs into .venv, lints, type-checks, then runs pytest.
# The pytest session starts its own real Kafka broker (port 19092) and, for the S3 checkpoint
# tests, a real S3 API server (S3Proxy, ports 18333-18334), both fetched with mvn; for the
# PostgreSQL tests, a real PostgreSQL server (port 15432) from Debian's package.
# Extra arguments go to pytest, e.g.  bash deploy/test.sh tests/unit -q  (the 40 slowest tests
# are listed at the end: where CI time goes)
#
#   bash deploy/test.sh --fast   the edit loop's tier: lint, types and the unit tests that need
#                                no server (no broker, S3 or PostgreSQL), in about 2 minutes;
#                                in 2 workers too (pytest 35 s against 70 s in one process)
#
#   The whole suite runs in 2 pytest-xdist workers (-n 2 --dist loadfile: one file's tests, and
#   its module fixtures, on one worker; the longest files first, tests/workers.py), each with
#   its own broker, S3 and PostgreSQL on ports of its own (5 above the previous worker's: the
#   second worker's broker is on 19097). On the 2-core machine that takes about half the time
#   of one process, as most of it is waiting on brokers and jobs.
#   PROCESSOR_TEST_WORKERS=1 bash deploy/test.sh   one process, the tests in collection order
#   PROCESSOR_TEST_WORKERS=N bash deploy/test.sh   N workers (at most 10)
set -euo pipefail
source "$(dirname "$0")/setup.sh"
# Two pytest-xdist workers unless PROCESSOR_TEST_WORKERS says otherwise (1: one process).
workers=()
if [ "${PROCESSOR_TEST_WORKERS:-2}" -gt 1 ]; then
  workers=(-n "${PROCESSOR_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
fi
if [ "${1:-}" = "--fast" ]; then
  shift
  ruff check processor tests bench examples
  ruff format --check processor tests bench examples
  mypy processor tests bench
  exec python -m pytest tests/unit -q -m "not server and not integration" "${workers[@]}" "$@"
fi
# The status page is tested in a real browser: Debian's Chromium, installed here when missing
# (as root; elsewhere that test says it is skipped).
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; } \
    >/tmp/processor-apt-chromium.log 2>&1 ||
    echo "test: could not install chromium (see /tmp/processor-apt-chromium.log)" >&2
fi
# The PostgreSQL tests start their own server from Debian's binaries (tests/conftest.py, port
# 15432; under CI a missing PostgreSQL fails them): Debian's postgresql, installed here when
# missing (as root). Told first not to create the package's own cluster, which its postinst
# would start on 5432: nothing of the package runs, only our test server does.
if ! python -m tests.postgres_server bindir >/dev/null && command -v apt-get >/dev/null &&
  [ "$(id -u)" = 0 ]; then
  (export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq &&
    apt-get install -y -qq --no-install-recommends postgresql-common &&
    sed -ri 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
      /etc/postgresql-common/createcluster.conf &&
    apt-get install -y -qq --no-install-recommends postgresql) \
    >/tmp/processor-apt-postgresql.log 2>&1 ||
    echo "test: could not install postgresql (see /tmp/processor-apt-postgresql.log)" >&2
fi
# The quick Nexmark (tests/integration/test_nexmark.py) runs on the nexmark crate's own events:
# its binary, built with cargo when missing (about 2 minutes once; kept in ~/.cargo/bin). No
# cargo: those tests say they are skipped (under CI they fail).
if ! command -v nexmark >/dev/null && [ ! -x "$HOME/.cargo/bin/nexmark" ]; then
  cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
  if [ -x "$cargo" ]; then
    "$cargo" install --quiet --locked nexmark --version 0.2.0 --features bin \
      >/tmp/processor-cargo-nexmark.log 2>&1 ||
      echo "test: could not build nexmark (see /tmp/processor-cargo-nexmark.log)" >&2
  else
    echo "test: no cargo: the Nexmark tests will be skipped (https://rustup.rs)" >&2
  fi
fi
ruff check processor tests bench examples
ruff format --check processor tests bench examples
mypy processor tests bench
python -m pytest "${workers[@]}" "${@:--q}" --durations=40
