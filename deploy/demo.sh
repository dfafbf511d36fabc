#!/usr/bin/env bash
# Word count end to end on a fresh machine: installs into .venv, starts the local Kafka broker
# (127.0.0.1:9092), loads a generated corpus, runs `processor local` until all input is
# committed, prints the top words and checks every count against a direct count.
# Extra arguments go to `processor demo`, e.g.  bash deploy/demo.sh --words 5000000 --workers 3
set -euo pipefail
source "$(dirname "$0")/setup.sh"
processor demo "$@"
