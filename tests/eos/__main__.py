"""``python -m tests.eos --records N --bounces B --kills K --seed S [--port P]``: the ported
EOS test on a three-broker cluster of its own (RF 3, min ISR 2), started here, or reused
when it runs already at ``--port``; stopped at the end unless ``--keep-cluster``.

Prints each fault as it happens, the verifier's result line and the recovery times; exits 1
unless every record was delivered exactly once and no transaction is left open.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from processor.localkafka.cluster import LocalCluster
from tests.eos.run import EosRun, Plan
from tests.eos.verify import report


def main(argv: list[str] | None = None) -> int:
    """Run the test as the arguments say; 0 when verified exact."""
    args = _parser().parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="eos-"))
    data_dir = Path(args.data_dir) if args.data_dir else workdir / "kafka"
    nodes = LocalCluster(nodes=3, port=args.port, data_dir=data_dir, heap="384m")
    nodes.start(timeout=300)
    plan = Plan(
        records=args.records,
        rate=args.rate,
        bounces=args.bounces,
        kills=args.kills,
        seed=args.seed,
        partitions=args.partitions,
        keys=args.keys,
        interval_ms=args.interval_ms,
    )
    settings = {"replication_factor": "3", **dict(s.split("=", 1) for s in args.setting)}
    try:
        run = EosRun(nodes.bootstrap, workdir / "job", plan, **settings)
        print(f"job {run.job.job}: {plan}; logs in {workdir}", flush=True)
        outcome = run.run()
    finally:
        if not args.keep_cluster:
            nodes.stop()
    report(outcome.result)
    times = outcome.recovery_s
    if times:
        print(
            f"recovery after {len(times)} of {len(outcome.faults)} faults: median "
            f"{statistics.median(times):.1f} s, max {max(times):.1f} s "
            f"({', '.join(f'{t:.1f}' for t in times)})"
        )
    print(f"run took {outcome.seconds:.0f} s (ended {time.strftime('%H:%M:%S')})")
    return 0 if outcome.result.ok else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.eos", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=500, help="input records a second")
    parser.add_argument("--bounces", type=int, default=1, help="clean stops (SIGTERM)")
    parser.add_argument("--kills", type=int, default=1, help="kill -9 of a worker")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=19692, help="brokers on P, P+1, P+2")
    parser.add_argument("--partitions", type=int, default=5)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--interval-ms", type=int, default=5000, help="checkpoint interval")
    parser.add_argument("--workdir", default="", help="logs and the cluster's data")
    parser.add_argument("--data-dir", default="", help="the cluster's (default: in --workdir)")
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument(
        "--setting", action="append", default=[], help="NAME=VALUE: PROCESSOR_NAME for the job"
    )
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
