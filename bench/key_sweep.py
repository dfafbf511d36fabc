"""Word count's key-count sweep (issue #42): the balanced live capacity of every row at 10 k,
1 M and 10 M keys, uniform and Zipf, so that state outgrows the caches and combining stops
paying. One sitting, one machine: each point is a `bench/capacity.py` sitting (every row,
``--runs`` runs each, interleaved), the points one after the other.

    python bench/key_sweep.py [--keys 10000,1000000,10000000] [--dists uniform,zipf]
        [--systems processor,kafka_streams,flink,quix] [--rows ...] [--runs 3] [--port 29392]

Each point writes its ``bench/results/capacity-<stamp>.json`` (with ``keys``, ``dist`` and the
distinct words its pool holds); the sweep lists them in ``keysweep-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import capacity
from bench.harness.common import machine, say
from bench.harness.keyspace import DISTRIBUTIONS
from bench.harness.modes import RESULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10000,1000000,10000000")
    parser.add_argument("--dists", default=",".join(DISTRIBUTIONS))
    parser.add_argument("--systems", default="processor,kafka_streams,flink,quix")
    parser.add_argument("--rows", default="")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=29392)
    args = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    before = set(RESULTS.glob("capacity-*.json"))
    points: list[Path] = []
    for keys in [int(k) for k in args.keys.split(",") if k]:
        for dist in [d for d in args.dists.split(",") if d]:
            say(f"key sweep: {keys:,} keys, {dist}")
            common = ["--systems", args.systems, "--runs", str(args.runs), "--port", str(args.port)]
            rows = ["--rows", args.rows] if args.rows else []
            code = capacity.main([*common, *rows, "--keys", str(keys), "--dist", dist])
            made = sorted(set(RESULTS.glob("capacity-*.json")) - before - set(points))
            points += [p for p in made if not p.name.endswith(".partial.json")]
            if code != 0:
                say(f"key sweep: {keys} {dist} failed ({code})")
    out = RESULTS / f"keysweep-{stamp}.json"
    report = {"machine": machine(), "points": [p.name for p in points]}
    out.write_text(json.dumps(report, indent=2) + "\n")
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
