"""A loop task's back-edge: the records its stage fed back, read from its partition of the
loop's feedback topic and processed at each barrier (docs/loops.md has the rules and why).

- **Never aligned.** The feedback partition carries no barriers. Waiting for barrier n on it
  would wait for the task's own transaction n: a deadlock.
- **Processed at the barrier, in log order.** Records are read (read_committed, so only
  those of committed transactions) into a buffer as they come, up to
  ``PROCESSOR_FEEDBACK_BUFFER_BYTES`` (32 MiB, and a chunk of records more): past
  that the rest waits in the log (a loop that feeds back more than it consumes, or a backlog
  after downtime, grows the topic, never the task's memory). When barrier n is aligned on
  the forward channels, the buffered records from ``F(n-1)`` up to ``F(n)``, the position
  read to, are processed, before the snapshot. Epoch n is the forward records between
  barriers n-1 and n, then the fed-back records ``[F(n-1), F(n))``.
- **Part of the snapshot.** Snapshot n holds ``F(n)``. After a restore the task reads the
  feedback partition from there: records processed up to n are not read again, records
  committed up to n and not processed yet (the seed's back-edge log) are, and records of
  aborted transactions are never seen. The feedback the task writes in epoch n commits with
  transaction n: a zombie's is fenced with the rest of it.
- **Replayable.** The commit metadata holds ``F(k)`` of the recent aligned barriers
  (`history`), declined checkpoints included, so that the replay after a fallback restore
  processes the same fed-back records at the same barriers as the first run.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor.config import Settings
from processor.engine.chain import StageChain
from processor.kafka import clients
from processor.models.records import decode_shuffle
from processor.worker.task import check

log = logging.getLogger(__name__)

# F(k) of this many recent aligned barriers ride in the commit metadata: a fallback replays
# at most that many epochs (about 20 bytes each, under the broker's 4 KiB metadata limit).
HISTORY = 64
# What a loop task reads ahead of its barriers at most (record values' bytes, plus a chunk):
# the default of ``feedback_buffer_bytes``.
BUFFER_BYTES = 32 * 1024 * 1024
CHUNK = 64  # records read at a time: what the buffer may hold past BUFFER_BYTES
# How long the replay after a fallback waits for fed-back records it knows were committed.
REPLAY_WAIT_S = 120.0
# The snapshot's key for F(n), and the commit metadata's for the history.
SNAPSHOT_KEY = "feedback"
HISTORY_KEY = "fed"


class FeedbackInput:
    """The task's partition of its loop's feedback topic, through a consumer of its own."""

    def __init__(
        self,
        task_id: str,
        topic: str,
        partition: int,
        consumer: Consumer,
        on_malformed: Callable[[], None] = lambda: None,
        limit: int = BUFFER_BYTES,
    ) -> None:
        self.task_id = task_id
        self.tp = TopicPartition(topic, partition)
        self.consumer = consumer
        self.position = 0  # F: the next record to process
        self._buffer: list[tuple[int, int, list[list[Any]]]] = []  # (offset, bytes, items)
        self._read_to = 0  # past the last record buffered
        self._held = 0  # the buffer's bytes
        self._limit = limit
        self.history: list[tuple[int, int]] = []  # (checkpoint, F at its barrier)
        self.malformed = 0  # records no task of the loop wrote (skipped)
        self._on_malformed = on_malformed  # the task's skipped-records metric

    def start(self, position: int, history: list[tuple[int, int]]) -> None:
        """Read from ``position`` (F of the restored snapshot; the log start of a new job)."""
        self.position = self._read_to = position
        self.history = history[-HISTORY:]
        self.consumer.assign([TopicPartition(self.tp.topic, self.tp.partition, position)])

    def poll(self, wait: float = 0.0, batch: int = 10_000, full: bool = False) -> None:
        """Buffer up to ``batch`` records read since the last call (waiting up to ``wait``
        for the first), until the buffer holds ``limit`` bytes (``full``: all the same, for
        the replay, which needs what the first run had read); a chunk at a time, so that it
        holds at most a chunk more."""
        while batch > 0 and (full or self._held < self._limit):
            chunk = min(batch, CHUNK)
            msgs = clients.consume_ready(self.consumer, chunk, wait) if wait else None
            if msgs is None:
                msgs = self.consumer.consume(chunk, 0)
            if not msgs:
                return
            batch, wait = batch - len(msgs), 0.0
            for msg in msgs:
                if check(msg):
                    self._take(msg)

    def _take(self, msg: Message) -> None:
        offset: int = msg.offset()  # type: ignore[assignment]
        self._read_to = offset + 1
        value = msg.value() or b""
        try:
            _, body = decode_shuffle(value)
        except (ValueError, struct.error, TypeError, RecursionError):
            body = None
        if not isinstance(body, list) or any(
            type(item) is not list or len(item) != 2 for item in body
        ):
            self.malformed += 1  # aborted leftovers are never seen; nothing else is ours
            self._on_malformed()
            return
        self._buffer.append((offset, len(value), body))
        self._held += len(value)

    def at_barrier(self, chain: StageChain, checkpoint_id: int, quiet: bool) -> int:
        """Barrier ``checkpoint_id`` is aligned: process the fed-back records up to F of it
        (in a replay, F as the first run had it), and return how many there were."""
        if quiet:
            target = self._replayed_position(checkpoint_id)
            self._wait_for(target, checkpoint_id)
        else:
            self.poll()
            target = self._read_to
        n = 0
        keep = 0
        for i, (offset, size, body) in enumerate(self._buffer):
            if offset >= target:
                keep = i
                break
            chain.fed_back(body, quiet)
            n += len(body)
            self._held -= size
        else:
            keep = len(self._buffer)
        del self._buffer[:keep]
        self.position = max(self.position, target)
        if not quiet:
            self.history.append((checkpoint_id, self.position))
            del self.history[:-HISTORY]
        return n

    def _replayed_position(self, checkpoint_id: int) -> int:
        for checkpoint, position in reversed(self.history):
            if checkpoint == checkpoint_id:
                return position
        raise RuntimeError(
            f"{self.task_id}: the replay after the fallback reached checkpoint "
            f"{checkpoint_id}, whose feedback position was not recorded (more than {HISTORY} "
            "checkpoints since the fallback snapshot): its loop's records cannot be replayed"
        )

    def _wait_for(self, target: int, checkpoint_id: int) -> None:
        """Read until every record below ``target`` (committed in the first run) is here."""
        deadline = time.monotonic() + REPLAY_WAIT_S
        while self._read_to < target:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.task_id}: replaying checkpoint {checkpoint_id}, the feedback "
                    f"records up to {self.tp.topic}[{self.tp.partition}]@{target} did not "
                    f"come within {REPLAY_WAIT_S:.0f} s (read to {self._read_to})"
                )
            self.poll(wait=0.2, full=True)

    @property
    def buffered(self) -> int:
        """Fed-back records read ahead, waiting for a barrier."""
        return len(self._buffer)

    def lag(self) -> int:
        """Fed-back records not processed yet: read ahead, or not read yet (those of the open
        transaction too: the loop has not settled while it feeds records back)."""
        # Before its first record `_read_to` is where it was assigned.
        return clients.behind(self.consumer, self.tp, self._read_to) + len(self._buffer)

    def snapshot_meta(self) -> dict[str, Any]:
        return {SNAPSHOT_KEY: self.position}

    def commit_meta(self) -> dict[str, Any]:
        return {HISTORY_KEY: self.history}


def open_feedback(
    settings: Settings, task_id: str, topic: str, partition: int, on_malformed: Callable[[], None]
) -> FeedbackInput:
    """A loop task's feedback input, through a consumer whose own prefetch is no larger than
    the read-ahead it feeds."""
    limit = settings.feedback_buffer_bytes
    consumer = clients.task_consumer(settings, **feedback_prefetch(limit))
    return FeedbackInput(task_id, topic, partition, consumer, on_malformed, limit)


def feedback_prefetch(limit: int) -> dict[str, int]:
    """The feedback consumer's own prefetch (librdkafka's queue and fetch sizes), within
    ``limit`` bytes: the read-ahead bound would mean little over a 64 MiB queue."""
    kbytes = max(1024, min(65536, limit // 1024))
    return {
        "queued.max.messages.kbytes": kbytes,
        "fetch.max.bytes": max(1_048_576, min(52_428_800, limit)),
    }


def history_of(meta: dict[str, Any]) -> list[tuple[int, int]]:
    """The (checkpoint, F) pairs of a commit's metadata."""
    return [(int(k), int(f)) for k, f in meta.get(HISTORY_KEY, [])]


def position_of(held: dict[str, Any], checkpoint_id: int) -> int:
    """F of a snapshot: where its task's feedback is read from after a restore."""
    if SNAPSHOT_KEY not in held:
        raise RuntimeError(
            f"snapshot {checkpoint_id} holds no feedback position: taken by a job without this "
            "loop (a loop's records cannot be restored from it)"
        )
    return int(held[SNAPSHOT_KEY])
