"""Engine CPU per Nexmark event in one process: the queries of examples/nexmark through the
test driver (`processor.testing.Driver`), no broker, so only the engine's own work is timed
(decoding, the user's functions, state, shuffles encoded and decoded, sinks encoded).

    python bench/experiments/nexmark_driver.py --queries q4,q5,q6 --rounds 5 \
        --checkout /path/to/other/checkout      # A/B: runs alternate between the two
    python bench/experiments/nexmark_driver.py --queries q4 --profile 25   # cProfile's top 25
    python bench/experiments/nexmark_driver.py --queries carts:partitioned,carts:full

``--instructions`` counts instructions per event under valgrind's callgrind instead (a run
over all the events less one over their first fifth): slower, but the same on a busy machine
as on a quiet one, where CPU time per event varies by a third between runs.

``carts:VARIANT`` is the user pipeline of bench/user_pipeline.py instead (bench/pipelines/
carts_avro.py, its ``variant``), over ``--events`` of its own input (4 partitions, with keys
and ``source`` headers).

Events: ``--events`` (200,000) of the ``nexmark`` crate (``nexmark --format json``, the binary
bench/nexmark.py uses), then a closing event 60 s of event time later, as the bench loads them.
Each run is a child process (``--checkout``: with that checkout's engine first on the path),
with the GC thresholds and frozen start-up heap of a worker process (``--python-gc``: Python's),
timed on its own CPU clock over ``send_all`` and ``finish``; its output is hashed, so an A/B
also shows whether both engines gave the same rows in the same order. Prints per query and
engine the median µs of CPU per event with its range.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import zip_longest
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLOSING_GAP_MS = 60_000


def _carts(variant: str, events: int) -> tuple[Any, Callable[[Any], int]]:
    """The user pipeline and what sends its input into a driver (the number of records)."""
    from bench.pipelines import carts_avro

    parts = carts_avro.generate(events, 4)
    records = [r for row in zip_longest(*parts) for r in row if r is not None]

    def feed(driver: Any) -> int:
        for _part, key, value, source, ts in records:
            headers = [("source", source)] if source else None
            driver.send("carts", value, key=key, timestamp=ts, headers=headers)
        return len(records)

    return carts_avro.build(variant=variant or "partitioned"), feed


def _nexmark(query: str, events_file: str, limit: int) -> tuple[Any, Callable[[Any], int]]:
    """A Nexmark query and what sends the first ``limit`` events into a driver (the number
    of records)."""
    build = runpy.run_path(str(ROOT / "examples" / "nexmark" / f"{query}.py"))["build"]
    lines = Path(events_file).read_text().splitlines()[:limit]
    events = [json.loads(line) for line in lines]
    times = [next(iter(e.values()))["date_time"] for e in events]
    last = max(times) + CLOSING_GAP_MS
    closing = {
        "Person": {
            "id": 0,
            "name": "",
            "email_address": "",
            "credit_card": "",
            "city": "",
            "state": "",
            "date_time": last,
            "extra": "",
        }
    }
    inputs = [(None, e, t) for e, t in zip(events, times, strict=True)] + [(None, closing, last)]

    def feed(driver: Any) -> int:
        driver.send_all({"nexmark": inputs})
        return len(inputs)

    return build(), feed


def _run_one(query: str, events_file: str, events: int, profile: int, python_gc: bool) -> None:
    """In the child: one query over the events; prints a JSON line."""
    from processor.testing import Driver  # the engine of the checkout first on the path
    from processor.worker.service import GC_THRESHOLDS

    name, _, variant = query.partition(":")
    if name == "carts":
        pipeline, feed = _carts(variant, events)
    else:
        pipeline, feed = _nexmark(query, events_file, events)
    driver = Driver(pipeline, 4, 4, 20_000)
    if not python_gc:  # as a worker process sets it (processor/worker/service.py)
        gc.set_threshold(*GC_THRESHOLDS)
        gc.collect()
        gc.freeze()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.process_time()
    sent = feed(driver)
    driver.finish()
    cpu_s = time.process_time() - started
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
    outputs = driver.outputs()
    digest = hashlib.sha256(repr(sorted(outputs.items())).encode()).hexdigest()[:16]
    rows = sum(len(v) for v in outputs.values())
    result = {"us_per_event": cpu_s / sent * 1e6, "rows": rows, "digest": digest, "sent": sent}
    print(json.dumps(result))


def _child(
    checkout: Path, query: str, events_file: str, args: argparse.Namespace, events: int = 0
) -> dict[str, object]:
    """One run in a child process (``events``: of the input's first, else ``--events``); with
    ``--instructions``, under callgrind, its instructions in ``instructions``."""
    command = [
        sys.executable,
        __file__,
        "--child",
        query,
        "--events-file",
        events_file,
        "--events",
        str(events or args.events),
        "--profile",
        str(args.profile),
        *(["--python-gc"] if args.python_gc else []),
    ]
    if args.instructions:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
    done = subprocess.run(
        command,
        env={**os.environ, "PYTHONPATH": f"{checkout}:{ROOT}"},
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
    )
    if args.profile:
        print(done.stderr, file=sys.stderr)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    collected = re.search(r"Collected : (\d+)", done.stderr)
    if collected:
        result["instructions"] = int(collected.group(1))
    return result


def _instructions(
    checkout: Path, query: str, events_file: str, args: argparse.Namespace
) -> dict[str, object]:
    """Instructions per event: the difference of a run over all the events and one over the
    first fifth (so start-up, imports and the pipeline's build cancel out)."""
    whole = _child(checkout, query, events_file, args)
    fifth = _child(checkout, query, events_file, args, max(1, args.events // 5))
    events = int(str(whole["sent"])) - int(str(fifth["sent"]))
    spent = int(str(whole["instructions"])) - int(str(fifth["instructions"]))
    return {**whole, "instructions_per_event": spent / events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", default="q4,q5,q6")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkout", type=Path, help="alternate with this checkout's engine")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N")
    parser.add_argument(
        "--python-gc", action="store_true", help="Python's GC thresholds, not the workers'"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per event under valgrind's callgrind, not CPU time (~50x slower)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--events-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _run_one(args.child, args.events_file, args.events, args.profile, args.python_gc)
        return
    binary = shutil.which("nexmark") or str(Path.home() / ".cargo" / "bin" / "nexmark")
    engines = {"this": ROOT, **({"other": args.checkout.resolve()} if args.checkout else {})}
    results: dict[tuple[str, str], list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        events_file = str(Path(tmp) / "events.jsonl")
        if any(not q.startswith("carts") for q in args.queries.split(",")):
            with open(events_file, "w") as out:
                subprocess.run(
                    [binary, "-n", str(args.events), "--format", "json"], stdout=out, check=True
                )
        for _ in range(args.rounds):
            for query in args.queries.split(","):
                for name, checkout in engines.items():
                    run = _instructions if args.instructions else _child
                    got = run(checkout, query, events_file, args)
                    results.setdefault((query, name), []).append(got)
    for (query, name), runs in sorted(results.items()):
        measure, unit = "us_per_event", "us/event"
        if args.instructions:
            measure, unit = "instructions_per_event", "instructions/event"
        values = [float(str(r[measure])) for r in runs]
        digests = sorted({str(r["digest"]) for r in runs})
        print(
            f"{query} {name}: {statistics.median(values):,.1f} {unit} ({min(values):,.1f}-"
            f"{max(values):,.1f}), {runs[0]['rows']} rows, output {','.join(digests)}"
        )


if __name__ == "__main__":
    main()
