"""A keyed task of a timed pipeline with order-sensitive operators, in-process, fed a shuffle
log written record by record, recovered in several ways; its committed output must be what
the same log gives a task that never failed.

The operators see order: a first-sight ``process`` (emits a key the first time it comes), a
last-value ``reduce``, an event-time window fired by watermarks, a ``map`` that fails on some
records (dead records), and a second stage downstream that receives the forwarded
watermarks. Counts would hide a replay in another order; these do not.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from processor import Pipeline
from processor.config import load_settings
from processor.jobs.graph import JobGraph
from processor.kafka import clients
from processor.models.records import (
    Barrier,
    Watermark,
    control_kind,
    decode_watermark,
    encode_barrier,
    encode_shuffle,
    encode_watermark,
)
from processor.plan.stages import plan
from tests.integration.keyed_thread import KeyedTaskThread

STAGE = "keyed"
DOWNSTREAM = "total"

Record = tuple[bytes | None, bytes]


def _first_sight(event: dict[str, Any], state: Any) -> list[str]:
    if state.get():
        return []
    state.set(True)
    return [event["k"]]


def _strict(event: dict[str, Any]) -> int:
    if event.get("bad"):
        raise ValueError(f"bad event {event['v']}")
    return int(event["v"])


def _pipeline(job: str) -> Pipeline:
    p = Pipeline()
    events = p.source(f"{job}.in", value="json", timestamp=lambda e: e["ts"])
    keyed = events.key_by(lambda e: e["k"], name=STAGE)
    keyed.process(_first_sight, name="first").sink(f"{job}.first")
    keyed.reduce(lambda a, b: b, name="last").sink(f"{job}.last")
    keyed.map(_strict, name="strict").sink(f"{job}.strict")
    # A running sum of a count's updates, after it in the stage: it sees where flushes fall.
    keyed.count(name="n").reduce(lambda a, b: a + b, name="n-sum").sink(f"{job}.nsum")
    windowed = keyed.window(size_ms=1000, name="win").count(name="win-count")
    windowed.sink(f"{job}.win")
    windowed.key_by(lambda n: "all", name=DOWNSTREAM).sum(name="total-sum").sink(f"{job}.total")
    return p


class PipelineTaskRun(KeyedTaskThread):
    """Shuffle partition 0 of the ``keyed`` stage of a fresh job, and its task in a thread."""

    def __init__(self, bootstrap: str, workdir: Path, channels: int, **settings: str) -> None:
        job = f"kr-{uuid.uuid4().hex[:8]}"
        self.job = job
        self.workdir = workdir / job
        config = load_settings(
            bootstrap_servers=bootstrap,
            job_name=job,
            shuffle_partitions=1,
            state_dir=self.workdir / "state",
            checkpoint_dir=self.workdir / "checkpoints",
            **settings,
        )
        graph = JobGraph(job, plan(_pipeline(job)))
        super().__init__(config, graph, f"{STAGE}-0", graph.shuffle_topic(STAGE), channels)
        admin = clients.admin(config)
        topics = [self.topic, graph.shuffle_topic(DOWNSTREAM), graph.late_topic]
        for topic in [*topics, config.dlq_topic, *self.sinks()]:
            clients.ensure_topic(admin, topic, 1)

    def sinks(self) -> list[str]:
        return [f"{self.job}.{name}" for name in ("first", "last", "strict", "win", "nsum")]

    # -- the log ------------------------------------------------------------------------------

    def data(self, channel: int, *events: dict[str, Any]) -> None:
        body = [[e["k"], e, e["ts"]] for e in events]
        self._send(encode_shuffle(channel, body), None)

    def watermark(self, channel: int, time_ms: int, idle: bool = False) -> None:
        self._send(*encode_watermark(Watermark(channel, time_ms, idle)))

    def barrier(self, channel: int, checkpoint_id: int) -> None:
        self._send(*encode_barrier(Barrier(checkpoint_id, channel)))

    # -- its storage and what it committed ---------------------------------------------------

    def task_dir(self) -> Path:
        return self.workdir / "checkpoints" / self.job / f"{STAGE}-0"

    def lose_snapshot(self, checkpoint_id: int) -> None:
        (manifest,) = self.task_dir().glob(f"**/chk-{checkpoint_id:012d}/_snapshot.json")
        manifest.unlink()

    def committed(self, topic: str) -> list[tuple[bytes | None, bytes, list[Any]]]:
        """Every committed record of a one-partition topic: key, value, headers."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.bootstrap_servers,
                "group.id": f"{self.job}.reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            tp = TopicPartition(topic, 0)
            _, high = clients.watermark_offsets(consumer, tp)
            consumer.assign([TopicPartition(topic, 0, 0)])
            out: list[tuple[bytes | None, bytes, list[Any]]] = []
            position = 0
            deadline = time.monotonic() + 30
            while position < high:
                assert time.monotonic() < deadline, f"{topic} not read to its end {high}"
                msg = consumer.poll(1)
                if msg is None:
                    position = consumer.position([tp])[0].offset
                    continue
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value() or b"", list(msg.headers() or [])))
                position = (msg.offset() or 0) + 1
            return out
        finally:
            consumer.close()

    def output(self) -> dict[str, list[Record]]:
        """The sinks' and the DLQ's records (the DLQ's value: its operator and error)."""
        out: dict[str, list[Record]] = {
            t: [(k, v) for k, v, _ in self.committed(t)] for t in self.sinks()
        }
        out["dlq"] = [
            (dict(h)["operator"], dict(h)["error"])
            for _, _, h in self.committed(self.settings.dlq_topic)
        ]
        return out

    def marks(self) -> list[tuple[int, bool]]:
        """The watermarks this task forwarded downstream, committed, in order."""
        marks = []
        for _, value, headers in self.committed(self.graph.shuffle_topic(DOWNSTREAM)):
            if control_kind(headers) == "watermark":
                mark = decode_watermark(value)
                marks.append((mark.time_ms, mark.idle))
        return marks


@pytest.fixture
def task_run(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., PipelineTaskRun]]:
    runs: list[PipelineTaskRun] = []

    def make(**settings: str) -> PipelineTaskRun:
        run = PipelineTaskRun(kafka_bootstrap, tmp_path, 2, **settings)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop()


def _event(k: str, v: int, ts: int, bad: bool = False) -> dict[str, Any]:
    return {"k": k, "v": v, "ts": ts, **({"bad": True} if bad else {})}


def _epochs_1_and_2(run: PipelineTaskRun) -> None:
    """Channel A (0) runs ahead into epoch 3 before B (1) has finished epoch 2: aligned, B's
    records come first, then A's, and A's watermark fires the window only after barrier 2."""
    run.data(0, _event("k1", 1, 100), _event("k2", 1, 200))
    run.data(1, _event("k1", 10, 150))
    run.watermark(0, 50)
    run.watermark(1, 50)
    run.barrier(0, 1)
    run.barrier(1, 1)
    run.barrier(0, 2)
    run.data(0, _event("k1", 2, 2500), _event("k5", 1, 2600))
    run.watermark(0, 2000)
    run.data(1, _event("k1", 3, 900), _event("k5", 3, 950), _event("k9", 7, 960, bad=True))
    run.watermark(1, 1500)
    run.barrier(1, 2)


def _replay_ends_mid_batch(run: PipelineTaskRun) -> None:
    """Nothing is held back at barrier 2: the replay ends in the middle of a batch, whose
    records after barrier 2 are epoch 3's, with output."""
    run.data(0, _event("k1", 1, 100))
    run.data(1, _event("k2", 1, 200))
    for channel in (0, 1):
        run.watermark(channel, 50)
    for channel in (0, 1):
        run.barrier(channel, 1)
    run.data(0, _event("k1", 2, 300))
    run.data(1, _event("k3", 1, 300))
    run.data(1, _event("k1", 4, 350))  # k1 twice in epoch 2: an early flush between
    run.barrier(0, 2)
    run.barrier(1, 2)
    run.data(1, _event("k7", 1, 400), _event("k1", 5, 400))
    run.data(0, _event("k8", 1, 400))


@pytest.mark.parametrize("flush_keys", ["200000", "1"], ids=["epochs", "early-flushes"])
@pytest.mark.parametrize(
    ("log", "windows"),
    [
        (_epochs_1_and_2, [(b"k1@0", b"3"), (b"k2@0", b"1"), (b"k5@0", b"1"), (b"k9@0", b"1")]),
        (_replay_ends_mid_batch, []),
    ],
)
def test_fallback_replays_in_the_first_runs_order(
    task_run: Callable[..., PipelineTaskRun],
    log: Callable[[PipelineTaskRun], None],
    windows: list[tuple[bytes, bytes]],
    flush_keys: str,
) -> None:
    """Hole 2: the committed snapshot 2 is lost; snapshot 1 stands in, and the replay of
    epoch 2 must align as the first run did. Otherwise A's records after its barrier 2 are
    applied before B's (the last value is stale, a first sight is emitted twice), the window
    that A's watermark fires fires during the quiet replay (never emitted), and the dead
    record of the replayed epoch is dead-lettered again. With ``flush_keys`` 1 the count
    flushes early after every shuffle record: the replay must too, or the running sum after
    it (``nsum``) sees fewer updates."""
    reference, faulted = task_run(flush_keys=flush_keys), task_run(flush_keys=flush_keys)
    for run in (reference, faulted):
        log(run)
        run.start()
        run.wait_for_ack(2)
        run.barrier(0, 3)
        run.wait_for(lambda task: task._aligner.pending == 3, "A's barrier 3")
    faulted.stop()  # before commit 3: epoch 3's output (the window) is aborted
    faulted.lose_snapshot(2)
    faulted.start()
    for run in (reference, faulted):
        run.barrier(1, 3)
        run.wait_for_ack(3)
        run.stop()
    expected = reference.output()
    assert sorted(expected[f"{reference.job}.win"]) == windows
    assert len(expected["dlq"]) == (1 if windows else 0)
    renamed = {k.replace(faulted.job, reference.job): v for k, v in faulted.output().items()}
    assert renamed == expected
    assert faulted.marks() == reference.marks()


def test_dead_records_commit_with_their_own_epoch(
    task_run: Callable[..., PipelineTaskRun],
) -> None:
    """Hole 4: a dead record read while checkpoint 1's snapshot is still uploading belongs to
    epoch 2. Written into the open transaction 1, it committed with checkpoint 1's positions,
    and the restart after commit 1 wrote it again."""
    run = task_run()
    run.data(0, _event("a", 1, 10))
    run.data(1, _event("b", 1, 10))
    run.barrier(0, 1)
    run.barrier(1, 1)
    # In the same batch as the barrier: processed while snapshot 1 uploads.
    run.data(0, _event("c", 1, 20, bad=True))
    run.start()
    run.wait_for_ack(1)
    run.wait_for(lambda task: task._records_in >= 1, "the dead record (epoch 2)")
    run.stop()  # before commit 2
    run.start()
    for channel in (0, 1):
        run.barrier(channel, 2)
    run.wait_for_ack(2)
    run.stop()
    assert [op for op, _ in run.output()["dlq"]] == [b"strict"]


def _both_at(run: PipelineTaskRun, watermark: int, checkpoint_id: int) -> None:
    """A record on each channel, then both channels' watermarks and barriers."""
    run.data(0, _event("a", 1, 100))
    run.data(1, _event("b", 1, 100))
    for channel in (0, 1):
        run.watermark(channel, watermark)
    for channel in (0, 1):
        run.barrier(channel, checkpoint_id)


def test_restored_task_remembers_it_forwarded_an_idle_mark(
    task_run: Callable[..., PipelineTaskRun],
) -> None:
    """Hole 6: a task whose channels went idle forwarded an idle mark. Restored, it must know
    that downstream holds it idle, and forward its watermark again once a channel is back."""
    reference, faulted = task_run(), task_run()
    for run in (reference, faulted):
        _both_at(run, 500, checkpoint_id=1)
        run.watermark(0, 500, idle=True)
        run.watermark(1, 500, idle=True)
        run.barrier(0, 2)
        run.barrier(1, 2)
        run.start()
        run.wait_for_ack(2)
    faulted.stop()
    faulted.start()
    for run in (reference, faulted):
        run.watermark(0, 500)  # back, at the watermark it had: downstream must hear of it
        run.barrier(0, 3)
        run.barrier(1, 3)
        run.wait_for_ack(3)
        run.stop()
    assert reference.marks()[-1] == (500, False)
    assert faulted.marks() == reference.marks()


def test_declined_checkpoint_forwards_its_watermark_again(
    task_run: Callable[..., PipelineTaskRun],
) -> None:
    """Hole 7: checkpoint 2's snapshot fails and is tolerated; its transaction, with the
    watermark it forwarded, is aborted. The next checkpoint must forward it again."""
    run = task_run(tolerable_checkpoint_failures="3")
    _both_at(run, 500, checkpoint_id=1)
    run.start()
    run.wait_for_ack(1)
    task_dir = run.task_dir()
    aside = task_dir.with_name(task_dir.name + ".aside")
    task_dir.rename(aside)
    task_dir.write_text("not a directory")  # unwritable, also for root
    run.watermark(0, 2500)
    run.watermark(1, 2500)
    run.barrier(0, 2)
    run.barrier(1, 2)
    run.wait_for_decline(2)
    task_dir.unlink()
    aside.rename(task_dir)
    run.barrier(0, 3)
    run.barrier(1, 3)
    run.wait_for_ack(3)
    run.stop()
    assert run.marks()[-1] == (2500, False)  # what downstream closes its windows by
    assert (b"a@0", b"1") in run.output()[f"{run.job}.win"]
