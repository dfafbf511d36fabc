"""Where a checkpoint's time goes when this project's epochs stretch at capacity.

The capacity sittings saw some 30 s windows in which the shuffle carried half its usual
records a second: the epochs had doubled. This runs the processor at fixed live rates
(``--rates words_per_s:seconds,...``, on a broker of its own), then reads every checkpoint
from the job's control topic and prints, per checkpoint: the epoch (this trigger to the
next), trigger -> the last source acknowledgement, trigger -> the last keyed one, and the
keyed tasks' alignment, synchronous part, upload and commit (the largest over the tasks),
with the records each side took in; then the medians over short and over long epochs.

    python bench/experiments/epoch_phases.py [--rates 1000000:240,1200000:180] [--port 39092]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness.lag import LagProbe
from bench.harness.loadgen import LoadGenerator
from bench.harness.measure import create_topic
from bench.peers.base import Job
from bench.peers.processor_peer import ProcessorPeer, read_json_topic
from processor.commands import corpus
from processor.localkafka.broker import LocalBroker

PHASES = ("epoch", "to_sources", "to_keyed", "alignment", "sync", "upload", "commit")
LONG_EPOCH_S = 1.5  # configured interval 1 s: an epoch this long is a stretched one


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000000:240,1200000:180")
    parser.add_argument("--port", type=int, default=39092)
    parser.add_argument("--out", default="", help="also write the raw records here (JSON)")
    args = parser.parse_args(argv)
    plan = [(int(r), float(s)) for r, s in (x.split(":") for x in args.rates.split(","))]
    messages, started = run(plan, args.port)
    rows = timeline(messages)
    print_timeline(rows, started)
    if args.out:
        Path(args.out).write_text(json.dumps({"plan": plan, "control": messages}))
    return 0


def run(plan: list[tuple[int, float]], port: int) -> tuple[list[tuple[float, Any]], float]:
    """The job at each rate of ``plan`` in turn; its control topic's records afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="epoch-phases-"))
    broker = LocalBroker(port=port, controller_port=port + 1, data_dir=tmp / "kafka")
    broker.start()
    try:
        job = Job(broker.bootstrap, "phases", "phases.input", "phases.output", tmp / "job")
        job.workdir.mkdir(parents=True)
        for topic in (job.input_topic, job.output_topic):
            create_topic(broker.bootstrap, topic, 4)
        gen = LoadGenerator(
            broker.bootstrap, job.input_topic, 4, list(corpus.lines(300_000, seed=2)), 1
        )
        probe = LagProbe(broker.bootstrap, job.name, job.input_topic, job.output_topic, 4)
        gen.start()
        running = ProcessorPeer().start(job)
        probe.start()
        gen.set_rate(plan[0][0])
        while probe.committed_input() == 0:
            time.sleep(0.5)
        started = time.time()
        for rate, seconds in plan:
            gen.set_rate(rate)
            print(f"{rate:,} words/s for {seconds:.0f} s", flush=True)
            time.sleep(seconds)
        gen.set_rate(0)
        time.sleep(5)
        running.stop()
        gen.stop()
        probe.stop()
        gen.close()
        return read_json_topic(broker.bootstrap, f"{job.name}.control", "phases-read"), started
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def timeline(messages: list[tuple[float, Any]]) -> list[dict[str, float]]:
    """Per checkpoint every task acknowledged: its trigger time and phases (seconds)."""
    triggers: dict[int, float] = {}
    acks: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for ts, body in messages:
        if body.get("kind") == "trigger":
            checkpoint = int(body["checkpoint"])
            triggers[checkpoint] = min(ts, triggers.get(checkpoint, ts))
        elif body.get("kind") == "ack":
            acks.setdefault(int(body["checkpoint"]), []).append((ts, body))
    rows = []
    for checkpoint in sorted(c for c in triggers if c + 1 in triggers and c in acks):
        at = triggers[checkpoint]
        sources = [(ts, b) for ts, b in acks[checkpoint] if b["task"].startswith("split-")]
        keyed = [(ts, b) for ts, b in acks[checkpoint] if not b["task"].startswith("split-")]
        if not sources or not keyed:
            continue
        row = {
            "id": checkpoint,
            "at": at,
            "epoch": triggers[checkpoint + 1] - at,
            "to_sources": max(ts for ts, _ in sources) - at,
            "to_keyed": max(ts for ts, _ in keyed) - at,
            "keyed_in": sum(int(b.get("records_in", 0)) for _, b in keyed),
            "sources_in": sum(int(b.get("records_in", 0)) for _, b in sources),
        }
        for phase in ("alignment", "sync", "upload", "commit"):
            row[phase] = max(float(b.get(f"{phase}_s", 0.0)) for _, b in keyed)
        row["source_sync"] = max(float(b.get("sync_s", 0.0)) for _, b in sources)
        rows.append(row)
    return rows


def print_timeline(rows: list[dict[str, float]], started: float) -> None:
    print(
        "  id      t  epoch ->src ->keyed | keyed: align  sync upload commit      in "
        "| sources: sync       in"
    )
    for r in rows:
        print(
            f"{r['id']:4.0f} {r['at'] - started:6.1f} {r['epoch']:6.2f} {r['to_sources']:5.2f} "
            f"{r['to_keyed']:7.2f} |       {r['alignment']:5.2f} {r['sync']:5.2f} "
            f"{r['upload']:6.2f} {r['commit']:6.2f} {r['keyed_in']:7.0f} "
            f"|          {r['source_sync']:5.2f} {r['sources_in']:8.0f}"
        )
    for name, chosen in (
        (f"epochs under {LONG_EPOCH_S} s", [r for r in rows if r["epoch"] < LONG_EPOCH_S]),
        (f"epochs of {LONG_EPOCH_S} s or more", [r for r in rows if r["epoch"] >= LONG_EPOCH_S]),
    ):
        if not chosen:
            continue
        medians = ", ".join(
            f"{k} {statistics.median(r[k] for r in chosen):.2f}" for k in (*PHASES, "source_sync")
        )
        keyed_in = statistics.median(r["keyed_in"] for r in chosen)
        print(f"{name} ({len(chosen)}): median s: {medians}; keyed records in {keyed_in:,.0f}")


if __name__ == "__main__":
    sys.exit(main())
