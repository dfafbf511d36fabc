"""The balanced live capacity alone, on a broker of its own (bench/harness/capacity.py measures):
per row, a JVM load generator steps the rate up on one job until a stage's lag grows; the
output is checked exact after every run. Writes ``bench/results/capacity-<timestamp>.json``
(and, while it runs, ``capacity-<timestamp>.partial.json``), which ``bench/run.py
--with-capacity`` joins into a full run.

    python bench/capacity.py [--systems ...] [--rows ROW,...] [--runs 5] [--port 29392]
        [--start ROW=RATE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import loadgen
from bench.harness.capacity import run_rows
from bench.harness.common import say
from bench.harness.modes import PEERS, RESULTS
from bench.harness.phases import capacity_rows
from bench.harness.provenance import source_version
from processor.localkafka.broker import LocalBroker


def main(argv: list[str] | None = None) -> int:
    """``python bench/capacity.py [--rows processor,kafka_streams] [--runs 5] [--port P]``:
    the capacity phase alone, on a broker of its own; writes
    ``bench/results/capacity-<timestamp>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="processor,kafka_streams,flink,quix")
    parser.add_argument("--rows", default="", help="only these rows (default: every row)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--port", type=int, default=29392)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--start", action="append", default=[], metavar="ROW=RATE")
    args = parser.parse_args(argv)
    names = [n for n in args.systems.split(",") if n]
    rows = capacity_rows(names)
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r.key in wanted]
    unknown = set(names) - PEERS.keys()
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    starts = {k: int(v) for k, _, v in (s.partition("=") for s in args.start)}
    loadgen.prepare()
    for row in rows:
        row.peer.prepare()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    tmp = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    out = RESULTS / f"capacity-{stamp}.json"
    # The runs so far, rewritten after each one: what a sitting cut short measured (a file a
    # full run can be given like any other; it is not quoted until it is renamed).
    partial = out.with_suffix(".partial.json")
    version = source_version()

    def save(report: dict[str, Any], path: Path) -> None:
        stamped = {**report, "timestamp": stamp, "commit": version["commit"], "source": version}
        path.write_text(json.dumps(stamped, indent=2) + "\n")

    try:
        broker.start()
        report = run_rows(
            rows,
            broker,
            args.runs,
            tmp,
            stamp.replace("-", ""),
            say,
            args.quick,
            starts=starts,
            after_run=lambda so_far: save(so_far, partial),
        )
        save(report, out)
        partial.unlink(missing_ok=True)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for key, entry in report["rows"].items():
        say(f"{key}: {entry['summary']}")
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
