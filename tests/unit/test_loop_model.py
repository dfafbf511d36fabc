"""Model check of a loop task's back-edge (`processor.worker.keyed_feedback.FeedbackInput`,
docs/loops.md): random interleavings of forward records and barriers, fetches of the
feedback partition, commits, declined checkpoints, crashes and restores (from the committed
snapshot, and fallbacks to an older one with the quiet replay), with the real class over a
model of a transactional partition read read_committed.

Properties: when the loop has settled, the committed state has processed every record
(forward ones, and every record fed back round the loop) exactly once; the committed
feedback partition holds every fed-back record exactly once; and a fallback's replay
rebuilds exactly the state the first run committed (the same records in the same order).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from processor.models.records import encode_shuffle
from processor.worker.keyed_feedback import (
    BUFFER_BYTES,
    CHUNK,
    FeedbackInput,
    history_of,
    position_of,
)

Rid = tuple[int, int]  # (forward record, times round the loop)


class TxnLog:
    """One partition written in transactions: offsets, and each transaction's fate."""

    def __init__(self) -> None:
        self.records: list[tuple[int, Rid]] = []  # (transaction, record)
        self.fate: dict[int, str] = {}  # open, committed, aborted

    def append(self, txn: int, rid: Rid) -> None:
        self.records.append((txn, rid))
        self.fate.setdefault(txn, "open")

    def committed(self) -> list[Rid]:
        return [rid for txn, rid in self.records if self.fate[txn] == "committed"]


@dataclass
class Msg:
    at: int
    body: bytes

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return self.body


class ReadCommitted:
    """A read_committed consumer of a `TxnLog`: stops at the first record of an open
    transaction (the last stable offset), skips aborted ones, and brings a random number of
    records per fetch."""

    def __init__(self, log: TxnLog, rng: random.Random) -> None:
        self.log, self.rng, self.pos = log, rng, 0

    def assign(self, tps: list[TopicPartition]) -> None:
        self.pos = tps[0].offset

    def consume(self, n: int, timeout: float = 0) -> list[Msg]:
        out: list[Msg] = []
        want = min(n, self.rng.choice([0, 1, 2, 5]))
        while len(out) < want and self.pos < len(self.log.records):
            txn, rid = self.log.records[self.pos]
            if self.log.fate[txn] == "open":
                break
            if self.log.fate[txn] == "committed":
                out.append(Msg(self.pos, encode_shuffle(0, [[str(rid), list(rid)]])))
            self.pos += 1
        return out

    def poll(self, timeout: float) -> Msg | None:
        got = self.consume(1)
        return got[0] if got else None


class AllAtOnce(ReadCommitted):
    """A consumer that brings as many records as asked for."""

    def __init__(self, log: TxnLog) -> None:
        super().__init__(log, random.Random(0))

    def consume(self, n: int, timeout: float = 0) -> list[Msg]:
        start = self.pos
        self.pos = min(len(self.log.records), start + n)
        return [
            Msg(i, encode_shuffle(0, [[str(rid), list(rid)]]))
            for i, (_, rid) in enumerate(self.log.records[start : self.pos], start)
        ]


@dataclass
class Collect:
    """The chain's side of `FeedbackInput.at_barrier`: what it feeds back, collected."""

    seen: list[Any]

    def fed_back(self, body: list[list[Any]], quiet: bool) -> None:
        self.seen.extend(body)


@dataclass
class Snapshot:
    checkpoint: int
    seen: list[Rid]
    forward: int  # the forward input's position after the barrier
    held: dict[str, Any]


@dataclass
class LoopTask:
    """A keyed loop task as `keyed.py`/`keyed_checkpoint.py` run it, reduced to its state."""

    depth: dict[int, int]  # forward record -> how often its record goes round
    fed: FeedbackInput
    seen: list[Rid] = field(default_factory=list)  # the state: records processed, in order
    out: list[Rid] = field(default_factory=list)  # feedback of the open epoch
    forward: int = 0
    replay_to: int = 0

    def fed_back(self, body: list[list[Any]], quiet: bool) -> None:  # the chain's
        for _, value in body:
            self.process((value[0], value[1]), quiet)

    def process(self, rid: Rid, quiet: bool) -> None:
        self.seen.append(rid)
        if not quiet and rid[1] < self.depth[rid[0]]:
            self.out.append((rid[0], rid[1] + 1))


def run_model(seed: int, fallbacks: bool = True, limit: int = BUFFER_BYTES) -> dict[str, int]:
    """``limit``: the feedback's read-ahead (`FeedbackInput`), in bytes."""
    rng = random.Random(seed)
    n_records = rng.randint(1, 25)
    depth = {i: rng.choice([0, 0, 1, 2, 4]) for i in range(n_records)}
    expected = Counter((i, k) for i in range(n_records) for k in range(depth[i] + 1))
    items: list[tuple[str, int]] = []  # the forward input: records and barriers
    checkpoint = 0
    for i in range(n_records):
        items.append(("r", i))
        if rng.random() < 0.3:
            checkpoint += 1
            items.append(("b", checkpoint))
    while checkpoint < 400:  # the coordinator goes on triggering checkpoints
        checkpoint += 1
        items.append(("b", checkpoint))
    log = TxnLog()

    def new_task() -> LoopTask:
        consumer = ReadCommitted(log, rng)
        fed = FeedbackInput("loop-0", "job.loop.feedback", 0, consumer, limit=limit)  # type: ignore[arg-type]
        return LoopTask(depth, fed)

    task = new_task()
    task.fed.start(0, [])
    snapshots: list[Snapshot] = []  # committed, retained (the last 3)
    first_run: dict[int, list[Rid]] = {}  # committed checkpoint -> its state
    committed_meta: dict[str, Any] = {}
    # The checkpoint past its barrier: its snapshot, commit metadata and transaction.
    pending: tuple[Snapshot, dict[str, Any], int] | None = None
    txns = 0  # transactions begun (a re-run epoch writes in a new one)
    resend: list[Rid] = []
    stats = Counter[str]()

    def finish_pending() -> None:
        nonlocal pending, committed_meta, resend
        if pending is None:
            return
        snap, meta, txn = pending
        pending = None
        if rng.random() < 0.15:  # the snapshot failed: checkpoint declined, txn aborted
            stats["declined"] += 1
            log.fate[txn] = "aborted"
            resend = [rid for t, rid in log.records if t == txn] + resend
            return
        log.fate[txn] = "committed"
        committed_meta = meta
        snapshots.append(snap)
        del snapshots[:-3]
        first_run.setdefault(snap.checkpoint, list(snap.seen))
        assert first_run[snap.checkpoint] == snap.seen

    def settled() -> bool:
        if not snapshots or pending is not None or task.replay_to:
            return False
        return Counter(snapshots[-1].seen) == expected and not task.out and not resend

    for _ in range(20_000):
        if settled() and task.forward >= len(items) - 1:
            break
        roll = rng.random()
        if roll < 0.04:  # SIGKILL: open transactions abort, the task restores
            stats["crashes"] += 1
            for txn, fate in log.fate.items():
                if fate == "open":
                    log.fate[txn] = "aborted"
            pending, resend = None, []
            task = new_task()
            if not snapshots:
                task.fed.start(0, [])
                continue
            restored = snapshots[-1]
            if fallbacks and len(snapshots) > 1 and rng.random() < 0.5:
                restored = rng.choice(snapshots[:-1])  # the committed one was lost
                task.replay_to = snapshots[-1].checkpoint
                stats["fallbacks"] += 1
            task.seen = list(restored.seen)
            task.forward = restored.forward
            task.fed.start(
                position_of(restored.held, restored.checkpoint), history_of(committed_meta)
            )
            continue
        if roll < 0.25:
            task.fed.poll()  # the main loop reads ahead on the back-edge
            continue
        if roll < 0.35:
            finish_pending()  # the commit finishes in the background
            continue
        if task.forward >= len(items):
            continue
        kind, value = items[task.forward]
        task.forward += 1
        replaying = task.replay_to > 0
        if kind == "r":
            task.process((value, 0), quiet=replaying)
            continue
        if replaying:  # `_replayed`: the first run's fed-back records, quietly
            task.fed.at_barrier(task, value, quiet=True)  # type: ignore[arg-type]
            if value == task.replay_to:
                assert task.seen == first_run[value], "the replay rebuilt another state"
                task.replay_to = 0
                stats["replays"] += 1
            continue
        finish_pending()  # `_checkpoint` closes checkpoint n-1 first
        task.fed.at_barrier(task, value, quiet=False)  # type: ignore[arg-type]
        txns += 1
        for rid in resend + task.out:  # transaction n: the feedback of epoch n
            log.append(txns, rid)
        log.fate[txns] = "open"
        resend, task.out = [], []
        snap = Snapshot(value, list(task.seen), task.forward, task.fed.snapshot_meta())
        # Sent as JSON text: what the task holds afterwards is not the commit's.
        meta = json.loads(json.dumps({"checkpoint": value, **task.fed.commit_meta()}))
        pending = (snap, meta, txns)
    else:
        raise AssertionError(f"the loop did not settle: {stats}")
    assert Counter(snapshots[-1].seen) == expected, "a record processed twice or never"
    fed_back = Counter(rid for rid in expected if rid[1] > 0)
    assert Counter(log.committed()) == fed_back, "a fed-back record committed twice or never"
    return dict(stats)


@pytest.mark.parametrize("seed", range(300))
def test_model_every_fed_back_record_exactly_once(seed: int) -> None:
    run_model(seed)


@pytest.mark.parametrize("seed", range(150))
def test_model_with_a_full_read_ahead_buffer(seed: int) -> None:
    """Read-ahead bounded to about one record: the rest waits in the log, and the replay
    after a fallback still processes what the first run did at each barrier."""
    run_model(seed, limit=30)


def test_a_full_buffer_leaves_the_rest_in_the_log() -> None:
    """A loop that feeds back more than it consumes grows the topic, not the task's memory:
    past the limit nothing more is read until a barrier processes what is held."""
    log = TxnLog()
    for rid in range(1000):
        log.records.append((0, (rid, 1)))
    log.fate[0] = "committed"
    one = len(encode_shuffle(0, [["0", [0, 1]]]))
    fed = FeedbackInput("loop-0", "t", 0, AllAtOnce(log), limit=10 * one)  # type: ignore[arg-type]
    fed.start(0, [])
    for _ in range(50):
        fed.poll()
    held = fed.buffered
    assert 10 <= held <= 10 + CHUNK
    seen: list[Any] = []
    chain = Collect(seen)
    assert fed.at_barrier(chain, 1, quiet=False) == held  # type: ignore[arg-type]
    assert fed.position == held and fed.buffered <= 10 + CHUNK


def test_the_model_meets_crashes_declines_fallbacks_and_replays() -> None:
    """The model's runs do reach the paths it checks."""
    total: Counter[str] = Counter()
    for seed in range(300):
        total.update(run_model(seed))
    assert min(total["crashes"], total["declined"], total["fallbacks"], total["replays"]) > 20


def test_a_record_no_task_wrote_is_skipped_and_counted() -> None:
    """A feedback record that is not the shuffle's format (no task of the loop wrote it) is
    skipped, not processed, and reaches the task's skipped-records metric."""
    log = TxnLog()
    log.append(1, (0, 1))
    log.fate[1] = "committed"
    consumer = ReadCommitted(log, random.Random(0))
    fetches = iter([[Msg(0, b"not a shuffle record")]])
    consumer.consume = lambda n, timeout=0: next(fetches, [])  # type: ignore[method-assign]
    counted: list[int] = []
    fed = FeedbackInput(
        "loop-0",
        "job.loop.feedback",
        0,
        consumer,  # type: ignore[arg-type]
        on_malformed=lambda: counted.append(1),
    )
    fed.start(0, [])
    fed.poll()
    assert fed.malformed == 1 and counted == [1]
    assert fed._buffer == []  # nothing to process at the next barrier
