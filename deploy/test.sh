#!/usr/bin/env bash
# The test suite on a fresh machine: installs into .venv, lints, type-checks, then runs pytest.
# The pytest session starts its own real Kafka broker (port 19092) and, for the S3 checkpoint
# tests, a real S3 API server (S3Proxy, ports 18333-18334), both fetched with mvn.
# Extra arguments go to pytest, e.g.  bash deploy/test.sh tests/unit -q  (the 40 slowest tests
# are listed at the end: where CI time goes)
set -euo pipefail
source "$(dirname "$0")/setup.sh"
ruff check processor tests bench examples
ruff format --check processor tests bench examples
mypy processor tests bench
python -m pytest "${@:--q}" --durations=40
