"""The seed's scenario, measured: a two-input operator (the join of
bench/experiments/join_pipeline.py) whose one input runs ten times faster than the other,
aligned against unaligned checkpoints.

Per mode, a fresh job on its own topics: ``views`` (4 partitions) at ``--rate`` x ``--skew``
records/s and ``clicks`` (2 partitions) at ``--rate``; each click names a view at most 5 s
older than itself, so every click makes exactly one pair (the join's bound is 10 s) and the
output is verified by count and by pair. First ``--backlog-seconds`` of both are produced
before the job starts (a backlog phase), then both are fed live at the fixed rates for
``--seconds`` (the steady phase). A read_committed reader takes every pair's latency: when it
saw the pair, less the pair's later event time (the producer's wall clock). From the job's
``<job>.checkpoints`` records: checkpoint duration (trigger to last acknowledgement) and, at
the join tasks, barrier alignment (first to last barrier of a checkpoint), per phase.

    python bench/experiments/join_skew.py --port 29892 --modes aligned,unaligned --rounds 2

Writes ``<results-dir>/<timestamp>-join-skew.json``; the summary table goes to stderr and its
JSON is the last line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness.common import ms as _ms  # noqa: E402
from bench.harness.common import say  # noqa: E402
from bench.harness.measure import create_topic, percentile  # noqa: E402
from bench.peers.base import spawn  # noqa: E402
from bench.peers.processor_peer import completed_checkpoints  # noqa: E402
from processor.localkafka.broker import LocalBroker  # noqa: E402

PIPELINE = Path(__file__).resolve().parent / "join_pipeline.py"
RESULTS = Path(__file__).resolve().parents[1] / "results"
VIEW_PARTITIONS, CLICK_PARTITIONS = 4, 2
CLICK_LOOKBACK_S = 5.0  # a click names a view at most this much older


class Feed:
    """Views and clicks at fixed rates, event time = the producer's wall clock (ms)."""

    def __init__(self, bootstrap: str, views: str, clicks: str, rate: int, skew: int) -> None:
        self.views_topic, self.clicks_topic = views, clicks
        self.rate, self.skew = rate, skew
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        self.rng = random.Random(7)
        self.recent: list[tuple[int, str]] = []  # (at, view id), for clicks to name
        self.views = 0
        self.clicks = 0

    def _send(self, topic: str, value: dict[str, Any], at: int) -> None:
        raw = json.dumps(value, separators=(",", ":")).encode()
        while True:
            try:
                self.producer.produce(topic, raw, timestamp=at)
                return
            except BufferError:
                self.producer.poll(0.05)

    def tick(self, at: int, seconds: float) -> None:
        """``seconds`` of records, all at event time ``at`` and just before."""
        views = int(self.rate * self.skew * seconds)
        clicks = int(self.rate * seconds)
        for i in range(views):
            view_at = at - int(1000 * seconds * (views - i) / views)
            vid = f"v{self.views}"
            self.views += 1
            self._send(self.views_topic, {"id": vid, "at": view_at}, view_at)
            self.recent.append((view_at, vid))
        while self.recent and self.recent[0][0] < at - CLICK_LOOKBACK_S * 1000 + 500:
            self.recent.pop(0)
        for _ in range(clicks):
            _, vid = self.recent[self.rng.randrange(len(self.recent))]
            cid = f"c{self.clicks}"
            self.clicks += 1
            self._send(self.clicks_topic, {"id": cid, "view": vid, "at": at}, at)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(120) == 0


class LatencyReader(threading.Thread):
    """Every committed pair: (seen at, latency s), and the set of (view, click)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"lat-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.samples: list[tuple[float, float]] = []
        self.pairs: set[tuple[str, str]] = set()
        self.duplicates = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(5000, 0.2):
                if msg.error() is not None:
                    continue
                now = time.time()
                body = json.loads(msg.value() or b"{}")
                pair = (str(body["v"]), str(body["c"]))
                if pair in self.pairs:
                    self.duplicates += 1
                self.pairs.add(pair)
                self.samples.append((now, now - int(body["t"]) / 1000))
        self.consumer.close()


def _phase(
    records: list[dict[str, Any]], start: float, end: float, join_prefix: str
) -> dict[str, Any]:
    chosen = [
        r for r in records if start <= float(r["triggered_at"]) and float(r["completed_at"]) <= end
    ]
    durations = [float(r["duration_s"]) for r in chosen]
    alignment = [
        float(ack.get("alignment_s", 0.0))
        for r in chosen
        for task, ack in (r.get("tasks") or {}).items()
        if task.startswith(join_prefix)
    ]

    def ms(values: list[float], p: float) -> float | None:
        found = percentile(values, p)
        return None if found is None else round(1000 * found, 1)

    return {
        "checkpoints": len(chosen),
        "duration_ms_p50": ms(durations, 50),
        "duration_ms_p99": ms(durations, 99),
        "join_alignment_ms_p50": ms(alignment, 50),
        "join_alignment_ms_p99": ms(alignment, 99),
    }


def run_mode(
    broker: LocalBroker, mode: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    job = f"skew-{mode}-{uuid.uuid4().hex[:6]}"
    views, clicks, output = f"{job}.views", f"{job}.clicks", f"{job}.view-clicks"
    create_topic(broker.bootstrap, views, VIEW_PARTITIONS)
    create_topic(broker.bootstrap, clicks, CLICK_PARTITIONS)
    feed = Feed(broker.bootstrap, views, clicks, args.rate, args.skew)
    step = 0.1
    start_ms = int(time.time() * 1000) - int(args.backlog_seconds * 1000)
    at = start_ms
    while at < int(time.time() * 1000):  # the backlog, at its event times
        at += int(step * 1000)
        feed.tick(at, step)
    feed.flush()
    backlog = (feed.views, feed.clicks)
    say(f"  {mode}: backlog of {backlog[0]:,} views and {backlog[1]:,} clicks")
    reader = LatencyReader(broker.bootstrap, output)
    reader.start()
    env = {
        **os.environ,
        "PROCESSOR_BOOTSTRAP_SERVERS": broker.bootstrap,
        "PROCESSOR_JOB_NAME": job,
        "PROCESSOR_STATE_DIR": str(workdir / job / "state"),
        "PROCESSOR_CHECKPOINT_DIR": str(workdir / job / "checkpoints"),
        "PROCESSOR_CHECKPOINT_INTERVAL_MS": str(args.interval_ms),
        "PROCESSOR_CHECKPOINT_ALIGNMENT": mode,
        "PROCESSOR_SHUFFLE_PARTITIONS": "4",
        "PROCESSOR_METRICS_PORT": "0",
        "BENCH_VIEWS_TOPIC": views,
        "BENCH_CLICKS_TOPIC": clicks,
        "BENCH_OUTPUT_TOPIC": output,
    }
    cmd = [sys.executable, "-m", "processor", "local", "--workers", "2"]
    cmd += ["--pipeline", str(PIPELINE)]
    proc = spawn(cmd, workdir / job / "processor.log", env)
    started = time.time()
    try:
        deadline = started + args.seconds
        while time.time() < deadline:  # live, at the fixed rates
            tick_start = time.time()
            feed.tick(int(tick_start * 1000), step)
            time.sleep(max(0.0, step - (time.time() - tick_start)))
        feed.flush()
        fed_until = time.time()
        wait_until = time.time() + args.drain_seconds
        while len(reader.pairs) < feed.clicks and time.time() < wait_until:
            time.sleep(0.5)
        ended = time.time()
    finally:
        proc.terminate()
        proc.wait(60)
        reader.stop.set()
        reader.join(10)
    records = completed_checkpoints(broker.bootstrap, job)
    # The backlog phase ends when the reader first sees a pair less than 2 s old.
    caught_up = next((seen for seen, lat in reader.samples if lat < 2.0), fed_until)
    steady = [lat for seen, lat in reader.samples if seen >= caught_up + 5 and seen <= fed_until]
    join_prefix = "views-by-id.join-"
    result = {
        "mode": mode,
        "job": job,
        "views": feed.views,
        "clicks": feed.clicks,
        "pairs": len(reader.pairs),
        "duplicates": reader.duplicates,
        "exact": len(reader.pairs) == feed.clicks and reader.duplicates == 0,
        "backlog_caught_up_s": round(caught_up - started, 2),
        "backlog": _phase(records, started, caught_up, join_prefix),
        "steady": {
            **_phase(records, caught_up + 5, fed_until, join_prefix),
            "latency_ms_p50": _ms(percentile(steady, 50)),
            "latency_ms_p99": _ms(percentile(steady, 99)),
        },
        "drained_s": round(ended - fed_until, 2),
    }
    say(f"  {mode}: {json.dumps(result)}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=29892, help="broker port (controller +1)")
    parser.add_argument("--modes", default="aligned,unaligned")
    parser.add_argument("--rounds", type=int, default=1, help="each mode once per round")
    parser.add_argument("--rate", type=int, default=500, help="clicks/s (views: x skew)")
    parser.add_argument("--skew", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60, help="live phase")
    parser.add_argument("--backlog-seconds", type=float, default=30)
    parser.add_argument("--drain-seconds", type=float, default=60)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="join-skew-") as tmp:
        broker = LocalBroker(
            port=args.port, controller_port=args.port + 1, data_dir=Path(tmp) / "k"
        )
        broker.start()
        try:
            runs = [
                run_mode(broker, mode, args, Path(tmp))
                for _ in range(args.rounds)
                for mode in modes
            ]
        finally:
            broker.stop()
    summary: dict[str, Any] = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]

        def med(phase: str, key: str, runs: list[dict[str, Any]] = mine) -> float | None:
            values = [r[phase][key] for r in runs if r[phase].get(key) is not None]
            return statistics.median(values) if values else None

        summary[mode] = {
            "runs": len(mine),
            "all_exact": all(r["exact"] for r in mine),
            **{
                f"{phase}_{key}": med(phase, key)
                for phase in ("backlog", "steady")
                for key in (
                    "duration_ms_p50",
                    "duration_ms_p99",
                    "join_alignment_ms_p50",
                    "join_alignment_ms_p99",
                )
            },
            "steady_latency_ms_p50": med("steady", "latency_ms_p50"),
            "steady_latency_ms_p99": med("steady", "latency_ms_p99"),
        }
    out = {
        "at": datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "rate_clicks_per_s": args.rate,
        "skew": args.skew,
        "loadavg_1m": os.getloadavg()[0],
        "summary": summary,
        "runs": runs,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{datetime.now():%Y%m%d-%H%M%S}-join-skew.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    say(f"results: {path}")
    for mode, figures in summary.items():
        say(f"{mode:>10}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
