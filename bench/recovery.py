"""Recovery time after SIGKILL of a worker (bench/harness/recovery.py measures): from the kill
to the first committed checkpoint of every task the killed worker ran, on an existing broker.

  restart   the worker is started again at once (a supervisor: `processor local`, Kubernetes)
  failover  the worker stays dead; its tasks move after the heartbeat timeout

    python bench/recovery.py [--bootstrap 127.0.0.1:9092] [--words 3000000] [--kills 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.recovery import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--words", type=int, default=3_000_000)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    report = {}
    for case, restart in [("restart", True), ("failover", False)]:
        times = measure(args.bootstrap, args.words, args.kills, restart)
        report[case] = {
            "recovery_s": [round(t, 3) for t in times],
            "median_s": round(statistics.median(times), 3),
        }
        print(f"{case}: recovery after SIGKILL {report[case]}", flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
