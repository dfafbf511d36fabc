"""Keyed source task: one partition of a source read as keyed (`processor.api.keying`), its
stage's keyed operators' state in RocksDB, with no shuffle before them.

A source's partition holds all of its keys' records, so the task that reads it can keep their
state: it is a `KeyedTask` whose one input channel is the source partition instead of a
shuffle's. Its epochs end at the coordinator's triggers, as a source task's do (nothing to
align: its position at the trigger is the barrier's); each is flushed, snapshotted and
committed as a keyed task's (`keyed_checkpoint`), with the source offset as the position,
and a restart restores the committed snapshot and reads on from its offset.

In a timed stage the source's watermark (`processor.engine.time.SourceWatermarks`) is the
one channel's, and it acts at each checkpoint, as a shuffle's arrives then.

What differs from a keyed task: a record in another partition than its key's (as the
source's partitioner places keys) is dead, ``misplaced_key``; no older snapshot stands in
for a lost committed one (the source holds no barriers to replay an epoch up to); a job
starts from a savepoint only with the partitions it was taken with (each task's snapshot
whole, no keys to move). Those say so in one line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor import metrics
from processor.checkpointing.aligner import BarrierHandler, BarrierOutcome
from processor.engine.dead import DeadRecord, Position
from processor.engine.time import SourceWatermarks, source_marks
from processor.errors import PermanentTaskFailure
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput
from processor.models.partitioners import Placement
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.store import RocksDBStore
from processor.state.savepoints import open_savepoint
from processor.worker import source_meta
from processor.worker.gaps import STATE_LOST, check_resume
from processor.worker.keyed import KeyedTask
from processor.worker.keyed_restore import ShuffleInput, committed_snapshot, restore_committed
from processor.worker.keyed_start import open_chain
from processor.worker.keyed_time import TaskTime
from processor.worker.postgres_orphans import after_savepoint
from processor.worker.task import (
    ClosedEpoch,
    TaskContext,
    Triggers,
    check,
    commit_metadata,
    committed_after_fencing,
)

log = logging.getLogger(__name__)

NO_FALLBACK = "a keyed source's snapshots do not fall back (its input has no barriers)"


class SavepointMismatch(PermanentTaskFailure):
    """A savepoint that cannot start a keyed source's task: none of its snapshots is this
    task's, or the topic has another number of partitions than when it was taken."""

    reason = "savepoint_mismatch"


class SourcePosition(BarrierHandler):
    """The one channel's position: the last offset read (-1 for none), where it resumes."""

    def read_to(self, next_offset: int) -> None:
        """Every record before ``next_offset`` is read."""
        (channel,) = self._pos
        self._pos[channel] = next_offset - 1


class KeyedSourceTask(KeyedTask):
    """Reads its source partition, runs each epoch through its chain and closes it at the
    coordinator's trigger n, as a keyed task closes one at barrier n."""

    def __init__(self, ctx: TaskContext, index: int) -> None:
        super().__init__(ctx, index)
        head, local = ctx.stage.source, ctx.stage.keyed_source
        assert head is not None and local is not None and local.local is not None
        self._head = head
        self.topic = head.topic
        self._input = ShuffleInput(ctx.task_id, head.topic, index, 1)
        self._time = TaskTime(1)
        self._partitioner = local.local
        self._placement: Placement | None = None  # once the topic's partitions are known
        self._marks = SourceWatermarks([index], head.out_of_orderness_ms, head.idle_ms)
        self._sent_mark: tuple[int, bool] | None = None
        self._next = 0  # the next offset to read
        self._taken = 0  # the newest checkpoint taken
        self._triggers = Triggers()
        self._where = Position(head.topic, index)
        skipped = metrics.records_skipped
        self._m_skipped = {r: skipped.labels(**self.labels, reason=r) for r in ("null", "empty")}

    def request_checkpoint(
        self, checkpoint_id: int, triggered_at: float, drain: bool = False
    ) -> None:
        self._triggers.offer(checkpoint_id, triggered_at, drain)

    # -- the start --------------------------------------------------------------------------

    def _restore(
        self, consumer: Consumer, snapshots: SnapshotProcess, db_path: Path
    ) -> RocksDBStore:
        """The committed snapshot (if any) into RocksDB, the chain over it, and the source
        partition assigned where it ends."""
        s, tp = self.settings, TopicPartition(self.topic, self.partition)
        meta = commit_metadata(committed_after_fencing(s, [tp])[0])
        last = int(meta.get("checkpoint", 0))
        if self.postgres is not None:  # its prepared transactions, as Kafka decided them
            self.postgres.recover(last)
            if not last:  # and those of the job it started from
                after_savepoint(s, self.ctx.graph, self.ctx.task_id, self.postgres)
        committed = committed_snapshot(meta, last, self._input)
        snapshots.open(committed)
        low, _ = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
        held: dict[str, Any] = {}
        start = low
        if committed is not None:
            layout = self.ctx.channel_layout()
            restored = restore_committed(
                s, snapshots, self._input, committed, db_path, low, layout, NO_FALLBACK
            )
            held = restored.info.meta
            start = self._input.resume_offset(held)
            check_resume(consumer, self.topic, self.partition, start, last, STATE_LOST)
        elif s.from_savepoint:
            held, start = self._from_savepoint(consumer, db_path)
        store = RocksDBStore(db_path)
        self.chain = open_chain(self.ctx, self.partition, store, held, self._time)
        self.last_checkpoint = self._taken = last
        channel = (self.partition, 0)
        self._aligner = SourcePosition([channel], {channel: start - 1}, last)
        self._next = start
        partitions = clients.topic_partitions(consumer, self.topic) or 1
        self._placement = Placement(self._partitioner, partitions)
        consumer.assign([TopicPartition(self.topic, self.partition, start)])
        log.info("%s: resuming %s[%d] at %d", self.ctx.task_id, self.topic, self.partition, start)
        return store

    def _from_savepoint(self, consumer: Consumer, db_path: Path) -> tuple[dict[str, Any], int]:
        """A job's first start from a savepoint: this task's saved snapshot, whole (its
        keys are its partition's), and the saved position; the snapshot's metadata and
        where to read from. The topic must have as many partitions as when it was taken."""
        store, savepoint = open_savepoint(self.settings)
        saved = savepoint.sources.get(self.topic, {})
        partitions = clients.topic_partitions(consumer, self.topic)
        task = self.ctx.task_id
        if task not in savepoint.tasks or len(saved) != partitions:
            raise SavepointMismatch(
                f"savepoint {self.settings.from_savepoint!r} has no snapshot of {task} for "
                f"keyed_source({self.topic!r}) over {partitions} partitions (it saved "
                f"{len(saved)}): a keyed source's state moves only with its partitions"
            )
        info = store.restore_task(savepoint, task, db_path)
        start = saved[self.partition]
        check_resume(consumer, self.topic, self.partition, start, 0, STATE_LOST)
        log.info("%s: loaded savepoint %s, at %d", task, self.settings.from_savepoint, start)
        return info.meta, start

    def _close_epoch(
        self,
        checkpoint_id: int,
        started: tuple[float, float],
        waited_s: float,
        flush_cpu_s: float,
        lag: int,
        positions: dict[str, int],
    ) -> ClosedEpoch:
        """Acknowledged as a source task's is: its partition's next offset (the snapshot
        keeps the channel's last one), which a savepoint saves as the source's position."""
        at = {str(self.partition): self._next}
        return super()._close_epoch(checkpoint_id, started, waited_s, flush_cpu_s, lag, at)

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self, out: TransactionalOutput, consumer: Consumer) -> None:
        s = self.settings
        timed = self.stage.timed
        while not self.ctx.stop.is_set():
            self._finish(out, block=False)
            wait = 0.005 if self._checkpoints.pending is not None else 0.05
            msgs = clients.consume_ready(consumer, s.consume_batch, wait)
            if timed:
                self._marks.polled(time.monotonic())
            if msgs:
                self._process(msgs, out, consumer)
            if self._triggers.requested > self._taken:
                self._trigger(out, consumer)

    def _process(self, msgs: list[Message], out: TransactionalOutput, consumer: Consumer) -> None:
        chain = self.chain
        assert chain is not None
        data = msgs if not any(map(Message.error, msgs)) else [m for m in msgs if check(m)]
        if not data:
            return
        self._next = data[-1].offset() + 1  # type: ignore[operator]
        valued = [m for m in data if m.value()]
        if len(valued) < len(data):  # no value: skipped and counted, as a source task does
            for msg in data:
                if not msg.value():
                    self._m_skipped["null" if msg.value() is None else "empty"].inc()
        placed = self._placed(valued)
        read = source_meta.read(placed, self._head)
        for msg, exc in read.refused:
            self._refuse(msg, str(exc), exc.reason)
        dead = len(chain.dead)
        newest = chain.values(read.values, metas=read.metas)
        if len(chain.dead) > dead:
            self._located(dead, read.kept)
        if newest is not None:
            self._marks.observe(self.partition, newest)
        self._records_in += len(read.kept)
        self._m_in.inc(len(read.kept))
        if chain.late:
            self._count_late()
        if self._writer.dlq.stops and chain.dead:
            self._writer.dlq.failed(out, chain.take_dead())
        flush_keys = self.settings.flush_keys
        if chain.pending >= flush_keys:
            self._flush(out)
        elif chain.output_buffered >= flush_keys:
            self._flush(out, operators=False)

    def _placed(self, msgs: list[Message]) -> list[Message]:
        """The messages in their key's partition; the others dead (``misplaced_key``)."""
        placement = self._placement
        assert placement is not None
        of, partition = placement.of, self.partition
        if all(of(k) == partition for k in map(Message.key, msgs)):
            return msgs
        kept = []
        for msg in msgs:
            home = of(msg.key())
            if home == partition:
                kept.append(msg)
                continue
            where = "it has no key" if home is None else f"its key's is {home}"
            self._refuse(
                msg,
                f"read from partition {partition} of {self.topic!r} but {where} (the "
                f"{self._partitioner} partitioner over {placement.partitions} partitions): "
                "keyed_source needs a topic partitioned by the Kafka key",
                "misplaced_key",
            )
        return kept

    def _refuse(self, msg: Message, error: str, reason: str) -> None:
        """A source record dead as it came, written with the epoch's other dead records."""
        assert self.chain is not None
        where = Position(self.topic, self.partition, msg.offset())
        value: bytes = msg.value() or b""
        dead = DeadRecord(self._head.name, error, value, reason, where=where, key=_key(msg))
        self.chain.dead.append(dead)

    def _located(self, start: int, kept: list[Message]) -> None:
        """The chain's dead records from ``start`` on: a source value dead is its record's
        bytes, with its position; another, this partition's position."""
        assert self.chain is not None
        dead = self.chain.dead
        for i in range(start, len(dead)):
            record = dead[i]
            if record.origin is not None:
                msg = kept[record.origin]
                where = Position(self.topic, self.partition, msg.offset())
                value = msg.value() or b""
                dead[i] = replace(record, value=value, origin=None, where=where, key=_key(msg))
            elif record.where is None:
                dead[i] = replace(record, where=self._where)

    # -- the checkpoint ---------------------------------------------------------------------

    def _trigger(self, out: TransactionalOutput, consumer: Consumer) -> None:
        """Trigger n: the epoch ends here, at the position read so far."""
        checkpoint_id, triggered_at = self._triggers.requested, self._triggers.requested_at
        self._taken = checkpoint_id
        delay = max(0.0, time.time() - triggered_at)
        metrics.start_delay_seconds.labels(**self.labels).observe(delay)
        if self.stage.timed:
            self._advance()
        assert isinstance(self._aligner, SourcePosition)
        self._aligner.read_to(self._next)
        outcome = BarrierOutcome(completed=checkpoint_id, positions=self._aligner.positions)
        self._checkpoint(outcome, 0.0, out, consumer, int(triggered_at * 1000))

    def _advance(self) -> None:
        """The source's watermark into the task's, the chain advanced as it rises."""
        assert self.chain is not None
        marks = source_marks(self._marks, self._sent_mark, drained=self._triggers.draining)
        for mark in marks:
            self._sent_mark = mark
            risen = self._time.watermarks.on_mark(0, mark[0], mark[1])
            if risen is not None:
                self.chain.advance(risen)
                metrics.watermark_seconds.labels(**self.labels).set(risen / 1000)


def _key(msg: Message) -> bytes | None:
    key = msg.key()
    return key.encode() if isinstance(key, str) else key
