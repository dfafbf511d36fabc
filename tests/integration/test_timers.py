"""Timers in ``process`` on the engine, against the real broker.

1. A keyed task of the cart pipeline (issue 23) with an event-time and a processing-time
   timer process, in-process, fed a shuffle log written record by record, and recovered: a
   restart from the committed snapshot, and a fallback to an older snapshot whose replay
   runs quietly. Its committed output must be what the same log gives a task that never
   failed, in order, and what the log says directly: every timer fires exactly once.
   Processing-time timers fire at checkpoints by the barrier's trigger time, which the test
   sets (a fake clock that the log carries).
2. The cart pipeline run as processes (coordinator and two workers), one worker SIGKILLed
   mid-stream: every abandoned cart once, every checkout once, as computed directly.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from processor import Pipeline
from processor.config import load_settings
from processor.jobs.graph import JobGraph
from processor.kafka import clients
from processor.models.records import Barrier, encode_barrier
from processor.plan.stages import plan
from tests.integration.carts_pipeline import expired, track
from tests.integration.harness import wait_until
from tests.integration.keyed_thread import KeyedTaskThread
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.integration.test_keyed_recovery import PipelineTaskRun
from tests.unit.test_timers import cart_outcomes

STAGE = "keyed"
CARTS = Path(__file__).resolve().parent / "carts_pipeline.py"


def _remind(event: dict[str, Any], state: Any) -> list[Any]:
    if "due" in event:
        state.timers.set(event["due"])  # wall-clock ms
    return []


def _reminded(at_ms: int, state: Any) -> list[Any]:
    return [{"user": state.key, "at": at_ms}]


def _pipeline(job: str) -> Pipeline:
    p = Pipeline()
    events = p.source(f"{job}.in", value="json", timestamp=lambda e: e["ts"])
    keyed = events.key_by(lambda e: e["k"], name=STAGE)
    keyed.process(track, on_timer=expired, name="carts").sink(f"{job}.carts")
    keyed.process(_remind, on_timer=_reminded, processing_time=True, name="remind").sink(
        f"{job}.remind"
    )
    return p


class TimerTaskRun(PipelineTaskRun):
    """Shuffle partition 0 of the ``keyed`` stage of `_pipeline`, its task in a thread."""

    def __init__(self, bootstrap: str, workdir: Path, channels: int) -> None:
        job = f"tm-{uuid.uuid4().hex[:8]}"
        self.job = job
        self.workdir = workdir / job
        config = load_settings(
            bootstrap_servers=bootstrap,
            job_name=job,
            shuffle_partitions=1,
            state_dir=self.workdir / "state",
            checkpoint_dir=self.workdir / "checkpoints",
        )
        graph = JobGraph(job, plan(_pipeline(job)))
        KeyedTaskThread.__init__(
            self, config, graph, f"{STAGE}-0", graph.shuffle_topic(STAGE), channels
        )
        admin = clients.admin(config)
        for topic in [self.topic, graph.late_topic, config.dlq_topic, *self.sinks()]:
            clients.ensure_topic(admin, topic, 1)

    def sinks(self) -> list[str]:
        return [f"{self.job}.carts", f"{self.job}.remind"]

    def barrier(self, channel: int, checkpoint_id: int) -> None:
        """Checkpoint n triggered at n seconds: the processing-time clock of this test."""
        self._send(*encode_barrier(Barrier(checkpoint_id, channel, checkpoint_id * 1000)))


@pytest.fixture
def timer_run(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[[], TimerTaskRun]]:
    runs: list[TimerTaskRun] = []

    def make() -> TimerTaskRun:
        run = TimerTaskRun(kafka_bootstrap, tmp_path, 2)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop()


def _event(k: str, kind: str, ts: int, due: int | None = None) -> dict[str, Any]:
    return {"k": k, "type": kind, "ts": ts, **({"due": due} if due is not None else {})}


def _both(run: TimerTaskRun, watermark: int | None, checkpoint_id: int | None) -> None:
    for channel in (0, 1):
        if watermark is not None:
            run.watermark(channel, watermark)
    for channel in (0, 1):
        if checkpoint_id is not None:
            run.barrier(channel, checkpoint_id)


def _epochs_1_to_3(run: TimerTaskRun) -> None:
    """Timers set in epoch 1 fire in epoch 2 (one superseded, one abandoned cart, one cleared
    by a checkout, a processing-time one at checkpoint 2), and in epoch 3 (its watermark is
    after both barriers 2: the task restarts or replays before it is committed)."""
    run.data(0, _event("a", "add", 100, due=1500))
    run.data(1, _event("b", "add", 200, due=2500), _event("c", "add", 300, due=3500))
    _both(run, 50, 1)
    run.data(0, _event("a", "add", 20_000))
    run.data(1, _event("c", "checkout", 25_000))
    _both(run, 40_000, 2)
    run.data(1, _event("d", "add", 41_000))
    _both(run, 60_000, None)


def _expected(job: str) -> dict[str, list[tuple[bytes | None, bytes]]]:
    def record(user: str, **fields: Any) -> tuple[bytes, bytes]:
        return user.encode(), json.dumps({"user": user, **fields}, separators=(",", ":")).encode()

    return {
        f"{job}.carts": [
            record("c", checked_out=1),  # epoch 2
            record("b", abandoned=1, at=30_200),  # epoch 2 (a's 30100: superseded by 50000)
            record("a", abandoned=2, at=50_000),  # epoch 3
            record("d", abandoned=1, at=71_000),  # epoch 4
        ],
        f"{job}.remind": [record("a", at=1500), record("b", at=2500), record("c", at=3500)],
        "dlq": [],
    }


@pytest.mark.parametrize("lose_snapshot", [False, True], ids=["restart", "fallback-replay"])
def test_each_timer_fires_once_through_a_restart(
    timer_run: Callable[[], TimerTaskRun], lose_snapshot: bool
) -> None:
    """Stopped after checkpoint 2 committed, with epoch 3 (which fired a's abandoned cart)
    processed but not committed; restarted from snapshot 2, or from snapshot 1 when snapshot
    2 is lost, replaying epoch 2 quietly: its timers (b's cart, a's reminder at checkpoint 2)
    must not fire again, epoch 3's must fire again, once, and later ones on time."""
    reference, faulted = timer_run(), timer_run()
    for run in (reference, faulted):
        _epochs_1_to_3(run)
        run.start()
        run.wait_for_ack(2)
        run.barrier(0, 3)
        run.wait_for(lambda task: task._aligner.pending == 3, "channel 0's barrier 3")
    faulted.stop()
    if lose_snapshot:
        faulted.lose_snapshot(2)
    faulted.start()
    for run in (reference, faulted):
        run.barrier(1, 3)
        run.wait_for_ack(3)
        _both(run, 100_000, 4)
        run.wait_for_ack(4)
        run.stop()
    expected = reference.output()
    assert expected == _expected(reference.job)
    renamed = {k.replace(faulted.job, reference.job): v for k, v in faulted.output().items()}
    assert renamed == expected


# -- the cart pipeline as processes, a worker SIGKILLed ---------------------------------------

PARTITIONS = 2


def _carts(seed: int, users: int = 300) -> list[dict[str, Any]]:
    """Cart events over about ten minutes of event time, in order; each user's adds less than
    20 s apart, then a checkout (after which the user may come back) or silence for good: an
    abandoned cart's user never comes back, so when it is declared does not matter."""
    rng = random.Random(seed)
    events = []
    for u in range(users):
        t = 1_700_000_000_000 + rng.randrange(600_000)
        for _ in range(rng.randrange(1, 4)):
            for _ in range(rng.randrange(1, 6)):
                t += rng.randrange(1, 20_000)
                events.append({"user": f"u{u}", "type": "add", "ts": t})
            if rng.random() < 0.5:
                t += rng.randrange(1, 20_000)
                events.append({"user": f"u{u}", "type": "checkout", "ts": t})
                t += rng.randrange(1, 60_000)
            else:
                break
    return sorted(events, key=lambda e: e["ts"])


def test_cart_pipeline_exactly_once_with_a_worker_killed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        CARTS,
        {"events": "cart-events", "outcomes": "cart-outcomes"},
        source_partitions=PARTITIONS,
        interval_ms=300,
        shuffle_partitions="2",
        expected_workers="2",
    )
    events = _carts(3)
    topic = run.topics["events"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    def send(chunk: list[bytes]) -> None:
        for raw in chunk:
            # A user's events in one partition, in order: the order the pipeline sees them.
            user = json.loads(raw)["user"]
            producer.produce(topic, raw, partition=int(user[1:]) % PARTITIONS)
        assert producer.flush(60) == 0

    expected = cart_outcomes([(e["user"], e, e["ts"]) for e in events])
    assert sum(1 for _, v in expected if "abandoned" in v) > 50
    assert sum(1 for _, v in expected if "checked_out" in v) > 50
    try:
        run.start_coordinator(exit_when_idle=False)
        run.start_worker(0)
        run.start_worker(1)
        # No pause in the feed: an idle partition would not hold the watermark back.
        run.feed_values([json.dumps(e).encode() for e in events], 12, send, hold_halfway=True)
        run.kill_mid_stream(1)
        assert run._feeder is not None
        run._feeder.join(120)
        # Far ahead in event time on every partition: the watermark passes every timer.
        end = events[-1]["ts"] + 10 * 60_000
        closing = json.dumps({"user": "zz-end", "type": "end", "ts": end}).encode()
        for p in range(PARTITIONS):
            producer.produce(topic, closing, partition=p)
        assert producer.flush(60) == 0
        total = sum(expected.values())

        def outcomes() -> Counter[tuple[str, str]]:
            got: Counter[tuple[str, str]] = Counter()
            for records in read_committed(kafka_bootstrap, run.topics["outcomes"]).values():
                for key, value, _ in records:
                    got[(key or b"").decode(), json.dumps(json.loads(value or b""))] += 1
            return got

        wait_until(lambda: sum(outcomes().values()) >= total, 120, "every cart's outcome")
        run.wait_for_checkpoints(2)  # anything extra would have come by now
        got = outcomes()
        assert got == expected, (
            f"{sorted((got - expected).items())[:5]} extra, "
            f"{sorted((expected - got).items())[:5]} missing"
        )
        assert not read_committed(kafka_bootstrap, run.settings.dlq_topic).get(0)
    finally:
        run.stop()
