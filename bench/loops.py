"""What a loop costs: examples/components.py (connected components, `KeyedStream.iterate`)
on its own local broker, at checkpoint intervals of 1 s and 100 ms, with 2 workers and 4
partitions per stage.

- **A path** of ``--path`` vertices, its edges in the input before the job starts: the label
  0 must go round the loop once per hop, so the time from the job's first checkpoint with
  input to the last one with any record, over the number of hops, is the time of a round.
- **A random graph** of ``--edges`` edges over a quarter as many vertices, in the input before
  the job starts: records processed per second (the edges' two directions and every label
  fed back), and checkpoints with records (rounds, and the epochs the backlog takes).

Every run's output is checked against a union-find (tests/loopcheck.py) before its figures
count. Prints a table; writes ``bench/results/loops-<time>.json``.

    python bench/loops.py [--port 29392] [--path 30] [--edges 20000] [--intervals 1000,100]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from processor.localkafka.broker import LocalBroker
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.loopcheck import COMPONENTS, check_components, random_edges

RESULTS = Path(__file__).resolve().parent / "results"
# The coordinator's line for each completed checkpoint.
_COMPLETE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*"
    r"checkpoint (\d+) complete in [\d.]+s: (\d+) records",
    re.MULTILINE,
)


def run_once(
    bootstrap: str, workdir: Path, edges: list[dict[str, int]], interval_ms: int
) -> dict[str, Any]:
    """The edges in the input, then the job until idle: its checkpoints with records."""
    run = PipelineRun(
        bootstrap,
        workdir,
        COMPONENTS,
        {"edges": "edges", "components": "components"},
        source_partitions=4,
        interval_ms=interval_ms,
        shuffle_partitions="4",
        expected_workers="2",
    )
    try:
        run.send(run.topics["edges"], [json.dumps(e).encode() for e in edges])
        run.start(workers=2)
        run.wait_idle(timeout=900)
        busy = [
            (datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(n))
            for at, _, n in _COMPLETE.findall(run.log("coordinator"))
            if int(n) > 0
        ]
        records = []
        for part in read_committed(bootstrap, run.topics["components"]).values():
            records += [((k or b"").decode(), json.loads(v or b"")) for k, v, _ in part]
        output = check_components(records, edges)
    finally:
        run.stop()
    span = busy[-1][0] - busy[0][0] if len(busy) > 1 else 0.0
    return {
        "interval_ms": interval_ms,
        "checkpoints_with_records": len(busy),
        "records_processed": sum(n for _, n in busy),
        "span_s": round(span, 3),
        "output_records": output,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=29392, help="the broker's (controller: +1)")
    parser.add_argument("--path", type=int, default=30, help="vertices of the path")
    parser.add_argument("--edges", type=int, default=20_000, help="edges of the random graph")
    parser.add_argument("--intervals", default="1000,100", help="checkpoint intervals, ms")
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (medians)")
    args = parser.parse_args()
    intervals = [int(i) for i in args.intervals.split(",")]
    path = [{"u": i, "v": i + 1} for i in range(args.path - 1)]
    graph = random_edges(args.edges // 4, args.edges, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="bench-loops-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    broker.start(timeout=120)
    rows: list[dict[str, Any]] = []
    try:
        for interval in intervals:
            for case, edges in (("path", path), ("random", graph)):
                runs = []
                for n in range(args.runs):
                    runs.append(
                        run_once(broker.bootstrap, tmp / f"{case}-{interval}-{n}", edges, interval)
                    )
                span = statistics.median(r["span_s"] for r in runs)
                row: dict[str, Any] = {"case": case, "interval_ms": interval, "runs": runs}
                row["span_s"] = span
                if case == "path":
                    hops = args.path - 1
                    row["seconds_per_round"] = round(span / hops, 3)
                    row["rounds_per_s"] = round(hops / span, 2) if span else None
                else:
                    done = statistics.median(r["records_processed"] for r in runs)
                    row["records_per_s"] = round(done / span) if span else None
                    row["checkpoints_with_records"] = statistics.median(
                        r["checkpoints_with_records"] for r in runs
                    )
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    finally:
        broker.stop()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"loops-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps({"path_vertices": args.path, "edges": args.edges, "rows": rows}, indent=1)
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
