"""Only the state-size scaling phase of bench/run.py, on its own broker
(bench/harness/scaling.py measures): per key count, N distinct keys, then a trickle of
updates; the steady checkpoints' duration and upload against the full snapshot size.

    python bench/scaling.py [--keys 100000,1000000] [--trickle-s 15] [--port 29092]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.scaling import state_scaling
from processor.localkafka.broker import LocalBroker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="100000,1000000", help="comma-separated key counts")
    parser.add_argument("--trickle-s", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=29092)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    broker.start()
    out = {}
    try:
        run_id = time.strftime("%Y%m%d%H%M%S")
        for keys in (int(k) for k in args.keys.split(",")):
            out[str(keys)] = state_scaling(
                broker.bootstrap, keys, tmp, run_id, trickle_s=args.trickle_s
            )
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
