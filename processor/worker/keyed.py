"""Keyed task: one partition of a keyed stage's shuffle, its operators' state in RocksDB,
aligned on the barriers of every upstream task (channel).

Epoch n (the records between barriers n-1 and n) runs through the stage's `StageChain`:
aggregations keep each key's latest value of the epoch in memory, ``process`` updates its
state cache and emits at once. When barrier n is aligned, the epoch is flushed into
transaction n, snapshotted, and committed once its snapshot is durable
(`keyed_checkpoint`); a restart restores the committed snapshot (`keyed_start`).

In a timed pipeline watermark records arrive beside the barriers: the task's watermark (the
minimum over its channels, `processor.engine.time`) closes windows and expires join
records as it rises, is forwarded downstream at each checkpoint, and its per-channel values
are part of the snapshot (`keyed_time`).

Transaction n+1 begins after n commits, so output of epoch n+1 waits in the chain: an
aggregation writes every key once per epoch with its latest value (last = exact).
"""

from __future__ import annotations

import logging
import shutil
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor import faults, metrics
from processor.checkpointing.aligner import NOOP, BarrierOutcome, Verdict
from processor.engine.chain import StageChain
from processor.engine.dead import Position
from processor.engine.time import NO_WATERMARK
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput, open_output
from processor.models.control import Decline
from processor.models.records import (
    control_kind,
    decode_barrier,
    decode_shuffle,
    decode_watermark,
)
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.store import RocksDBStore
from processor.worker.deadletter import DeadLetters
from processor.worker.keyed_checkpoint import KeyedCheckpoints, LocalState
from processor.worker.keyed_epoch import EpochWriter
from processor.worker.keyed_feedback import FeedbackInput, open_feedback
from processor.worker.keyed_restore import ShuffleInput
from processor.worker.keyed_start import KeyedStart
from processor.worker.keyed_time import TaskTime
from processor.worker.priority import KEYED_SYNC
from processor.worker.task import Task, TaskContext, check, local_dir, output_partitions

log = logging.getLogger(__name__)

_PROCESS = Verdict.PROCESS

# confluent-kafka types Message accessors as Optional; for a message whose error() is None,
# value() and offset() are set, so the hot path below does not test them again.


class KeyedTask(Task):
    """Reads its shuffle partition, aligns the barriers, runs each epoch through its chain
    and closes it at barrier n; its `EpochWriter` writes the epoch into the transaction and
    its `KeyedCheckpoints` snapshots and commits it."""

    def __init__(self, ctx: TaskContext, partition: int) -> None:
        super().__init__(ctx)
        self.partition = partition
        stage = ctx.stage
        self.stage = stage
        self.topic = ctx.graph.shuffle_topic(stage)
        self._input = ShuffleInput(ctx.task_id, self.topic, partition, ctx.input_partitions)
        self._time = TaskTime(ctx.input_partitions)
        # A join's channels: which input (0 left, 1 right) each belongs to.
        self._sides = (
            [ctx.graph.side_of(stage, u, ctx.parallelism) for u in range(ctx.input_partitions)]
            if stage.is_join
            else []
        )
        self.chain: StageChain | None = None  # once the state is restored
        self._fed: FeedbackInput | None = None  # a loop's back-edge (`keyed_feedback`)
        looped, loop = stage.loop is not None, stage.feedback
        self._writer = EpochWriter(
            self.shuffle_outputs(),
            (loop.name, partition) if looped and loop is not None else None,
            ctx.graph.feedback_topic(stage) if looped else None,
            DeadLetters.of_task(ctx.settings, ctx.task_id, self.labels),
            self.labels,
        )
        # After a fallback restore to snapshot m (`_replay_from`), the checkpoints up to the
        # committed one (`_replay_to`) are aligned again and their records go into the state
        # without output (see `keyed_restore.restore_snapshot`). 0: no replay.
        self._replay_from = 0
        self._replay_to = 0
        self._align_started: float | None = None
        self._waited_s = 0.0  # this epoch's waits for the previous checkpoint to finish
        self._m_in = metrics.records_in.labels(**self.labels)
        self._m_out = metrics.records_out.labels(**self.labels)
        self._m_bad = metrics.records_skipped.labels(**self.labels, reason="malformed_shuffle")

    def run(self) -> None:
        s = self.settings
        task_id = self.ctx.task_id
        workdir = local_dir(s, task_id)
        # Retention and its follow-up (purging the shuffle) wait for the store here, not in
        # the task thread.
        retainer = ThreadPoolExecutor(1, thread_name_prefix=f"retain-{task_id}")
        out = open_output(s, self.transactional_id)
        consumer = clients.task_consumer(s)
        if self.stage.loop is not None:
            topic = self.ctx.graph.feedback_topic(self.stage)
            self._fed = open_feedback(s, task_id, topic, self.partition, self._m_bad.inc)
        snapshots: SnapshotProcess | None = None
        store: RocksDBStore | None = None
        try:
            # Started first: the child's start-up overlaps the fencing below.
            snapshots = SnapshotProcess(s, f"{s.job_name}/{task_id}", task_id)
            if self.postgres is not None:  # before the producer fences its predecessors
                self.postgres.read_fences(clients.cluster_id(consumer, self.topic))
            out.init()
            inputs = [TopicPartition(self.topic, self.partition)]
            out.abort_leftovers(output_partitions(consumer, self.output_topics()), consumer, inputs)
            store = self._restore(consumer, snapshots, workdir / "db")
            self._start(LocalState(store, workdir, snapshots, retainer), consumer)
            self._loop(out, consumer)
            self._stop_postgres(out)
        finally:
            # A failed (perhaps fenced) task must not go on writing to storage: stop the
            # upload under way and drop the queued ones, retention above all.
            if snapshots is not None:
                snapshots.close()
            retainer.shutdown(wait=True, cancel_futures=True)
            out.close()
            consumer.close()
            if self._fed is not None:
                self._fed.consumer.close()
            if self.ctx.query is not None:
                self.ctx.query.close()  # no request reads the store from here on
            if store is not None:
                store.close()
            if self.postgres is not None:
                self.postgres.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def _restore(
        self, consumer: Consumer, snapshots: SnapshotProcess, db_path: Path
    ) -> RocksDBStore:
        """The task's state restored (`KeyedStart`) and its input assigned."""
        start = KeyedStart(self.ctx, self._input, self._time, self._fed, self.postgres)
        started = start.restore(consumer, snapshots, db_path)
        self.last_checkpoint = started.last_checkpoint
        self.chain = started.chain
        self._aligner = started.aligner
        self._replay_from, self._replay_to = started.replay_from, started.replay_to
        return started.store

    def _start(self, local: LocalState, consumer: Consumer) -> None:
        """The restored task's checkpoints; its committed state served (after a fallback,
        once the replay ends)."""
        assert self.chain is not None
        self._store = local.store
        self._checkpoints = KeyedCheckpoints(
            self.ctx,
            self._input,
            local,
            self.chain,
            self._writer,
            self._time,
            self._fed,
            self.postgres,
            consumer,
            self._aligner.resume_offsets()[self._input.partition],
        )
        if not self._replay_to:  # else the replay's end is the committed state
            self._checkpoints.serve_committed(self.last_checkpoint)
        self.state = "running"

    def _loop(self, out: TransactionalOutput, consumer: Consumer) -> None:
        s = self.settings
        while not self.ctx.stop.is_set():
            self._finish(out, block=False)
            # A checkpoint in flight: look again soon, its commit is on the latency path.
            wait = 0.005 if self._checkpoints.pending is not None else 0.05
            msgs = clients.consume_ready(consumer, s.consume_batch, wait)
            if msgs:
                self._process(msgs, out, consumer)
            if self._fed is not None:
                self._fed.poll()

    def _finish(self, out: TransactionalOutput, block: bool) -> None:
        """The checkpoint in flight committed, if it is (``block``: once it is)."""
        committed = self._checkpoints.finish(out, block)
        if committed is not None:
            self.last_checkpoint = committed

    def _stop_postgres(self, out: TransactionalOutput) -> None:
        """A clean stop: the checkpoint in flight finished (committed, or declined if its
        snapshot fails), the open transaction aborted, then no PostgreSQL transaction of the
        task stays prepared (`PostgresSinks.settle`)."""
        if self.postgres is None:
            return
        self._finish(out, block=True)
        out.abort()
        self.postgres.settle(self.last_checkpoint)

    def _process(self, msgs: list[Message], out: TransactionalOutput, consumer: Consumer) -> None:
        chain = self.chain
        assert chain is not None
        admit = self._aligner.admit
        partition = self.partition
        channels = self.ctx.input_partitions
        combined = self.stage.combiner is not None
        widths, sides = self.stage.pair_widths, self._sides
        flush_keys = self.settings.flush_keys
        # Only right after a fallback restore: a replayed record's output is committed already.
        quiet = self._replay_to > 0
        applied = 0
        for msg in msgs:
            if not check(msg):
                continue
            control = control_kind(msg.headers())
            if control == "watermark":
                self._on_watermark(msg, admit)
                continue
            if control == "barrier":
                self._records_in += applied
                self._m_in.inc(applied)
                applied = 0
                outcome = self._on_barrier(msg, out, consumer)
                quiet = self._replay_to > 0  # the replay ends at an aligned barrier
                if outcome.seeks:
                    for p, seek_to in outcome.seeks.items():
                        log.debug(
                            "%s: re-reading held-back records from %s[%d]@%d",
                            self.ctx.task_id,
                            self.topic,
                            p,
                            seek_to,
                        )
                        consumer.seek(TopicPartition(self.topic, p, seek_to))
                    break  # the rest of this batch is read again after the seek
                continue
            try:
                channel, body = decode_shuffle(msg.value())  # type: ignore[arg-type]
            except (ValueError, struct.error, TypeError, RecursionError):
                # Not written by an upstream task: skip rather than crash-loop.
                self._m_bad.inc()
                continue
            if (
                channel >= channels
                or (type(body) is dict and not combined)
                # Timed pairs carry their event time (and headers with metadata), untimed
                # ones none.
                or (type(body) is list and body and len(body[0]) not in widths)
            ):
                self._m_bad.inc()  # no such upstream task, or not its format: not written by one
                continue
            offset: int = msg.offset()  # type: ignore[assignment]  # set on data messages
            if admit((partition, channel), offset) is _PROCESS:
                dead = len(chain.dead)
                chain.shuffled(body, quiet, sides[channel] if sides else 0)
                applied += len(body)
                if len(chain.dead) > dead:
                    self._dead_at(dead, offset, out)
                if chain.pending >= flush_keys:
                    self._flush_early(out, quiet)
        self._records_in += applied
        self._m_in.inc(applied)
        if chain.late:
            self._count_late()
        # Dead records wait for the flush too: the open transaction may be the previous epoch's.
        if chain.output_buffered >= flush_keys and not quiet:
            self._flush(out, operators=False)

    def _flush_early(self, out: TransactionalOutput, quiet: bool) -> None:
        """After a shuffle record, by the log alone: a replay flushes where the first run did."""
        assert self.chain is not None
        if quiet:
            self.chain.flush(quiet=True)
        else:
            self._flush(out)

    def _on_watermark(self, msg: Message, admit: Any) -> None:
        try:
            mark = decode_watermark(msg.value() or b"")
        except struct.error:
            mark = None
        if mark is None or mark.channel >= self.ctx.input_partitions or not self.stage.timed:
            self._m_bad.inc()  # not written by an upstream task: skip rather than crash-loop
            return
        if admit((self.partition, mark.channel), msg.offset() or 0) is not _PROCESS:
            return  # held back with its channel: it is read again after the alignment
        risen = self._time.watermarks.on_mark(mark.channel, mark.time_ms, mark.idle)
        if risen is not None:
            assert self.chain is not None
            self.chain.advance(risen, quiet=self._replay_to > 0)
            metrics.watermark_seconds.labels(**self.labels).set(risen / 1000)

    def _count_late(self) -> None:
        assert self.chain is not None
        for operator, n in self.chain.late.items():
            metrics.late_records.labels(**self.labels, operator=operator).inc(n)
        self.chain.late.clear()

    def _send_watermark(self, out: TransactionalOutput | None) -> None:
        """The task's watermark (or an idle mark, when all its channels are idle) into every
        downstream shuffle partition, if it changed: after the epoch's records, before the
        barrier. ``out`` None: a replayed checkpoint, whose marks are committed already (only
        what was sent is remembered)."""
        assert self.chain is not None
        mark = self._time.next_mark(self.chain)
        if mark is None or out is None:
            return
        current = mark[0]
        if current > NO_WATERMARK:
            lag = max(0.0, time.time() - current / 1000)
            metrics.event_time_lag_seconds.labels(**self.labels).set(lag)
        self._writer.mark(out, mark)

    def _dead_at(self, start: int, offset: int, out: TransactionalOutput) -> None:
        """The chain's dead records from ``start`` on came in the shuffle record at
        ``offset``: that is where they were read. With PROCESSOR_ON_ERROR=stop, the task
        stops at once."""
        assert self.chain is not None
        dead = self.chain.dead
        where = Position(self.topic, self.partition, offset)
        dead[start:] = [replace(d, where=where) for d in dead[start:]]
        dlq = self._writer.dlq
        if dlq.stops:
            dlq.failed(out, self.chain.take_dead())

    def _flush(
        self, out: TransactionalOutput, checkpoint: bool = False, operators: bool = True
    ) -> None:
        """The epoch so far: state -> RocksDB, output -> the open transaction.

        ``checkpoint``: a snapshot follows, so the memtable flush starts right after the
        state write and runs in RocksDB's thread while the output is produced. ``operators``
        False: the output only (a point a replay cannot find again, see `_flush_early`)."""
        chain = self.chain
        assert chain is not None
        # The previous epoch's transaction must be closed (time the checkpoint is charged with).
        waiting = time.monotonic()
        self._finish(out, block=True)
        self._waited_s += time.monotonic() - waiting
        drained = self._writer.drain(chain, operators)
        if checkpoint:
            self._store.start_flush()
        if chain.late:
            self._count_late()
        shipped = self._writer.ship(out, drained)
        self._records_out += shipped
        self._m_out.inc(shipped)

    def _prepare_rows(self, checkpoint_id: int, out: TransactionalOutput) -> None:
        """The epoch's PostgreSQL rows, prepared before Kafka transaction n commits; the rows
        the database refused into the DLQ, in that transaction."""
        assert self.postgres is not None and self.chain is not None
        written = self.postgres.prepare(checkpoint_id, self.chain, self.ctx.task_id)
        if self.chain.has_dead:
            self._writer.dead_letter(out, self.chain.take_dead())
        self._records_out += written
        self._m_out.inc(written)

    def _tick(self, triggered_at_ms: int, quiet: bool = False) -> None:
        """Processing-time timers fire at each checkpoint, by the time it was triggered at:
        the barrier carries that time, so a replay after a fallback fires the same timers in
        the same epochs (quietly). Nothing is lost by waiting for the checkpoint: what a
        timer emits is visible only once that checkpoint commits anyway."""
        chain = self.chain
        assert chain is not None
        if chain.ticks:
            chain.tick(triggered_at_ms or int(time.time() * 1000), quiet)

    def _on_barrier(
        self, msg: Message, out: TransactionalOutput, consumer: Consumer
    ) -> BarrierOutcome:
        try:
            barrier = decode_barrier(msg.value() or b"")
        except struct.error:
            barrier = None
        if barrier is None or barrier.channel >= self.ctx.input_partitions:
            self._m_bad.inc()  # not written by a source task: skip rather than crash-loop
            return NOOP
        outcome = self._aligner.on_barrier(
            (self.partition, barrier.channel), barrier.checkpoint_id, msg.offset() or 0
        )
        now = time.monotonic()
        starts = self._align_started is None and (
            outcome.completed is not None or self._aligner.pending is not None
        )
        replayed = barrier.checkpoint_id <= self._replay_to  # its checkpoint is long done
        if starts and barrier.triggered_at_ms and not replayed:
            # The first barrier of a checkpoint reached this task: Flink's start delay.
            delay = max(0.0, time.time() - barrier.triggered_at_ms / 1000)
            metrics.start_delay_seconds.labels(**self.labels).observe(delay)
        if outcome.aborted is not None and outcome.aborted > self._replay_to:
            reason = f"overtaken by barrier {barrier.checkpoint_id}"
            self.ctx.report(Decline(self.ctx.task_id, outcome.aborted, reason))
        if outcome.completed is not None and outcome.completed <= self._replay_to:
            self._align_started = None
            self._replayed(outcome.completed, barrier.triggered_at_ms)
        elif outcome.completed is not None:
            if self._replay_to:
                # The log aligned checkpoint n in the first run, so the replay aligns it too:
                # past it, the quiet records would be output nobody committed.
                raise RuntimeError(
                    f"the replay after the fallback aligned checkpoint {outcome.completed} "
                    f"before the committed checkpoint {self._replay_to}"
                )
            alignment_s = now - (self._align_started or now)
            self._align_started = None
            self._checkpoint(outcome, alignment_s, out, consumer, barrier.triggered_at_ms)
        elif self._aligner.pending is not None and self._align_started is None:
            self._align_started = now
        return outcome

    def _replayed(self, checkpoint_id: int, triggered_at_ms: int) -> None:
        """A checkpoint of the replay after a fallback is aligned again: its epoch goes into
        the state as in the first run, and nothing out (transaction ``checkpoint_id`` holds
        it, committed). The replay ends with the committed checkpoint."""
        chain = self.chain
        assert chain is not None
        if self._fed is not None:
            self._fed.at_barrier(chain, checkpoint_id, quiet=True)
        self._tick(triggered_at_ms, quiet=True)
        chain.flush(quiet=True)  # into every operator's state; no output, no dead records
        chain.late.clear()
        if self.stage.timed:
            self._send_watermark(None)
        if checkpoint_id >= self._replay_to:
            self._replay_to = self._replay_from = 0
            self._checkpoints.serve_committed(checkpoint_id)
            log.info(
                "%s: replay after the fallback is done (checkpoint %d)",
                self.ctx.task_id,
                checkpoint_id,
            )

    def _checkpoint(
        self,
        outcome: BarrierOutcome,
        alignment_s: float,
        out: TransactionalOutput,
        consumer: Consumer,
        triggered_at_ms: int,
    ) -> None:
        """Barrier n is aligned: epoch n closed into transaction n and snapshotted (the
        synchronous part), its upload and commit left to `KeyedCheckpoints`."""
        checkpoint_id = outcome.completed
        assert checkpoint_id is not None and self.chain is not None
        faults.reach("barrier_aligned", self.ctx.task_id)
        metrics.alignment_seconds.labels(**self.labels).observe(alignment_s)
        started = (time.monotonic(), time.thread_time())
        waited_before = self._waited_s
        # Close checkpoint n-1 first: if it is declined, what it carried must go out again in
        # transaction n, with the offsets that move past it.
        self._finish(out, block=True)
        # The CPU-bound part: the worker's source threads step aside meanwhile (`priority`).
        with KEYED_SYNC.held():
            if self._fed is not None:  # the loop's records fed back since the last barrier
                self._records_in += self._fed.at_barrier(self.chain, checkpoint_id, quiet=False)
            positions = {str(u): off for (_, u), off in outcome.positions.items()}
            resume = self._aligner.resume_offsets()[self.partition]
            self._checkpoints.send_offsets(out, checkpoint_id, resume)
            flush_started_cpu = time.thread_time()
            sent_before = self._time.sent
            self._write_epoch(checkpoint_id, out, triggered_at_ms)
            flush_cpu_s = time.thread_time() - flush_started_cpu
            taken = self._checkpoints.take(checkpoint_id, out, sent_before)
        if taken is None:
            return
        future = self._checkpoints.upload(checkpoint_id, taken, positions)
        lag = self._checkpoints.lag()
        self._waited_s = 0.0
        epoch = self._close_epoch(
            checkpoint_id, started, waited_before, flush_cpu_s, lag, positions
        )
        self._checkpoints.committing(epoch, future, alignment_s, taken, sent_before)

    def _write_epoch(
        self, checkpoint_id: int, out: TransactionalOutput, triggered_at_ms: int
    ) -> None:
        """Epoch n into transaction n: its timers fired, its state and output flushed, its
        PostgreSQL rows prepared, then the task's watermark and barrier n downstream."""
        self._tick(triggered_at_ms)
        self._flush(out, checkpoint=True)
        if self.postgres is not None:
            self._prepare_rows(checkpoint_id, out)
        self._writer.dlq.tick()
        if self.stage.timed:
            self._send_watermark(out)
        self._writer.barriers(out, checkpoint_id, triggered_at_ms)
