#!/usr/bin/env bash
# Installs the project and its test tools into .venv (idempotent). Sourced by test.sh/demo.sh.
# Needs: python3.11+ with venv, Java 17+ and Maven (the Kafka broker, and the S3 API server of
# the tests, S3Proxy, are fetched from Maven Central on first use into ~/.cache/processor,
# outside the repo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
for tool in python3 java mvn; do
  command -v "$tool" >/dev/null || { echo "setup: '$tool' is required but not on PATH" >&2; exit 2; }
done
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# The dependencies from the lock (hashes checked), then the project itself without them.
stamp=.venv/.installed-$(cat pyproject.toml requirements-test.lock | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet --require-hashes -r requirements-test.lock
  .venv/bin/python -m pip install --quiet --no-deps -e .
  rm -f .venv/.installed-*
  touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# promtool checks the Prometheus config and alert rules in the deploy tests (skipped when
# absent). Only the binary is taken from Debian's package: nothing is installed system-wide.
if ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
  tmp=$(mktemp -d)
  fetch() { (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); }
  if fetch || { [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && fetch; }; then
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" && cp "$tmp/x/usr/bin/promtool" .venv/bin/
  else
    echo "setup: promtool is not available here; its checks will be skipped" >&2
  fi
  rm -rf "$tmp"
fi
