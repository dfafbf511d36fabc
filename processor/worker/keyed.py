"""Keyed task: one partition of a keyed stage's shuffle, its operators' state in RocksDB,
aligned on the barriers of every upstream task (channel).

Epoch n (the records between barriers n-1 and n) runs through the stage's `StageChain`:
aggregations keep each key's latest value of the epoch in memory, ``process`` updates its
state cache and emits at once. When barrier n is aligned, the epoch is flushed into
transaction n, snapshotted, and committed once its snapshot is durable
(`keyed_checkpoint`); a restart restores the committed snapshot (`keyed_restore`).

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
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor import metrics
from processor.checkpointing.aligner import (
    Channel,
    Verdict,
)
from processor.engine.chain import DeadRecord, StageChain
from processor.engine.dead import Position
from processor.engine.epoch import drain
from processor.engine.time import NO_WATERMARK
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput, open_output
from processor.models.records import (
    control_kind,
    decode_shuffle,
    decode_watermark,
)
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.state.storage import SnapshotMissing
from processor.worker.deadletter import DeadLetters
from processor.worker.epoch_out import segments_of, ship, write_mark
from processor.worker.gaps import STATE_LOST, check_resume
from processor.worker.keyed_checkpoint import KeyedCheckpoints, barrier_handler
from processor.worker.keyed_feedback import (
    FeedbackInput,
    history_of,
    open_feedback,
    position_of,
)
from processor.worker.keyed_restore import (
    ShuffleInput,
    load_savepoint,
    restore_snapshot,
)
from processor.worker.keyed_time import TaskTime
from processor.worker.layout import check_snapshot as check_layout
from processor.worker.postgres_orphans import after_savepoint
from processor.worker.task import (
    TaskContext,
    check,
    commit_metadata,
    committed_after_fencing,
    local_dir,
    output_partitions,
)

log = logging.getLogger(__name__)

_PROCESS = Verdict.PROCESS

# confluent-kafka types Message accessors as Optional; for a message whose error() is None,
# value() and offset() are set, so the hot path below does not test them again.


class KeyedTask(KeyedCheckpoints):
    def __init__(self, ctx: TaskContext, partition: int) -> None:
        super().__init__(ctx)
        self.partition = partition
        stage = ctx.stage
        self.stage = stage
        self.topic = ctx.graph.shuffle_topic(stage)
        self._input = ShuffleInput(ctx.task_id, self.topic, partition, ctx.input_partitions)
        # Downstream shuffles: (key_by name, topic, partitions, this task's channel in it).
        self._shuffles = self.shuffle_outputs()
        self._time = TaskTime(ctx.input_partitions)
        # A join's channels: which input (0 left, 1 right) each belongs to.
        self._sides = (
            [ctx.graph.side_of(stage, u, ctx.parallelism) for u in range(ctx.input_partitions)]
            if stage.is_join
            else []
        )
        self.chain: StageChain | None = None  # once the state is restored
        self._fed: FeedbackInput | None = None  # a loop's back-edge (`keyed_feedback`)
        self._init_checkpoints()
        self._m_in = metrics.records_in.labels(**self.labels)
        self._m_out = metrics.records_out.labels(**self.labels)
        skipped = metrics.records_skipped
        self._m_bad = skipped.labels(**self.labels, reason="malformed_shuffle")
        self._m_oversized = skipped.labels(**self.labels, reason="oversized_key")
        s = ctx.settings
        self._dlq = DeadLetters.of_task(s, ctx.task_id, self.labels)

    def run(self) -> None:
        s = self.settings
        workdir = local_dir(s, self.ctx.task_id)
        # Retention and its follow-up (purging the shuffle) wait for the store here, not in
        # the task thread.
        self._retainer = ThreadPoolExecutor(1, thread_name_prefix=f"retain-{self.ctx.task_id}")
        self._workdir = workdir
        out = open_output(s, self.transactional_id)
        consumer = clients.task_consumer(s)
        self._consumer = consumer
        if self.stage.loop is not None:
            topic = self.ctx.graph.feedback_topic(self.stage)
            self._fed = open_feedback(s, self.ctx.task_id, topic, self.partition, self._m_bad.inc)
        store: RocksDBStore | None = None
        try:
            # Started first: the child's start-up overlaps the fencing below.
            task_id = self.ctx.task_id
            self._snapshots = SnapshotProcess(s, f"{s.job_name}/{task_id}", task_id)
            if self.postgres is not None:  # before the producer fences its predecessors
                self.postgres.read_fences(clients.cluster_id(consumer, self.topic))
            out.init()
            inputs = [TopicPartition(self.topic, self.partition)]
            out.abort_leftovers(output_partitions(consumer, self.output_topics()), consumer, inputs)
            store = self._restore(consumer)
            self.state = "running"
            while not self.ctx.stop.is_set():
                self._finish_checkpoint(out, block=False)
                # A checkpoint in flight: look again soon, its commit is on the latency path.
                wait = 0.005 if self._pending is not None else 0.05
                msgs = clients.consume_ready(consumer, s.consume_batch, wait)
                if msgs:
                    self._process(msgs, out, consumer)
                if self._fed is not None:
                    self._fed.poll()
            self._stop_postgres(out)
        finally:
            # A failed (perhaps fenced) task must not go on writing to storage: stop the
            # upload under way and drop the queued ones, retention above all.
            if self._snapshots is not None:
                self._snapshots.close()
            self._retainer.shutdown(wait=True, cancel_futures=True)
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

    def _restore(self, consumer: Consumer) -> RocksDBStore:
        tp = committed_after_fencing(self.settings, [TopicPartition(self.topic, self.partition)])[0]
        meta = commit_metadata(tp)
        self.last_checkpoint = int(meta.get("checkpoint", 0))
        if self.postgres is not None:  # its prepared transactions: what Kafka decided
            self.postgres.recover(self.last_checkpoint)
            if not self.last_checkpoint:  # and those of the job it started from
                after_savepoint(self.settings, self.ctx.graph, self.ctx.task_id, self.postgres)
        committed: SnapshotRef | None = None
        if self.last_checkpoint:
            owner = meta.get("snapshot")
            if not isinstance(owner, str):
                raise SnapshotMissing(
                    f"the commit of checkpoint {self.last_checkpoint} on {self.topic}"
                    f"[{self.partition}] names no snapshot (written by an older version?)"
                )
            committed = SnapshotRef(self.last_checkpoint, owner)
        # Only now, with every predecessor fenced, may the generation be chosen.
        assert self._snapshots is not None
        self._snapshots.open(committed)
        positions: dict[Channel, int] = {}
        info_meta: dict[str, Any] = {}
        db_path = self._workdir / "db"
        if committed is not None:
            started = time.monotonic()
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(self.topic, self.partition), timeout=30, cached=False
            )
            unaligned = self.settings.checkpoint_alignment == "unaligned"
            restored = restore_snapshot(
                self._snapshots, self._input, committed, db_path, low, unaligned
            )
            if restored.replay_from:
                self._replay_from, self._replay_to = restored.replay_from, self.last_checkpoint
            info = restored.info
            check_layout(info.meta, self._layout(), info.ref.checkpoint_id)
            positions = restored.positions
            info_meta = info.meta
            took = time.monotonic() - started
            metrics.restores_total.labels(**self.labels).inc()
            metrics.last_restore_seconds.labels(**self.labels).set(took)
            metrics.state_size_bytes.labels(**self.labels).set(info.full_bytes)
            log.info(
                "%s: restored checkpoint %s (%d bytes) in %.3fs",
                self.ctx.task_id,
                info.ref,
                info.full_bytes,
                took,
            )
        elif self.settings.from_savepoint:
            if self._fed is not None:
                raise RuntimeError(
                    "a job with a loop cannot start from a savepoint: the records in flight "
                    "round its loop are not in it (docs/loops.md)"
                )
            info_meta = load_savepoint(self.settings, self.stage, self._input, db_path)
        if self._fed is not None:
            self._start_feedback(consumer, meta, info_meta if committed is not None else None)
        store = RocksDBStore(db_path)
        s = self.settings
        self.chain = StageChain(
            self.ctx.graph.plan,
            self.stage,
            self.partition,
            store,
            # A loop's feedback topic has as many partitions as the stage's shuffle.
            {n.name: s.shuffle_partitions for n in self.stage.outputs},
            s.max_key_bytes,
            self.ctx.graph.late_topic,
            s.combine,
            clients.record_limit(s),
        )
        self._store = store
        if self.stage.timed:
            self._time.restore(self.chain, info_meta)
        # Windows', joins', process timers, TTL deadlines (`processor.engine.expiry`).
        for prefix in self.chain.timed_operators():
            self.chain.restore_timers(prefix, store.items(prefix))
        channels = [(self.partition, u) for u in range(self.ctx.input_partitions)]
        # A replay aligns the barriers after the fallback snapshot again, as the first run did.
        aligned_to = self._replay_from if self._replay_to else self.last_checkpoint
        self._aligner = barrier_handler(s)(channels, positions, aligned_to)
        start = self._aligner.resume_offsets()[self.partition]
        check_resume(consumer, self.topic, self.partition, start, self.last_checkpoint, STATE_LOST)
        consumer.assign([TopicPartition(self.topic, self.partition, start)])
        log.info("%s: resuming %s[%d] at %d", self.ctx.task_id, self.topic, self.partition, start)
        if not self._replay_to:  # else the replay's end is the committed state
            self._serve_committed(self.last_checkpoint)
        return store

    def _start_feedback(
        self, consumer: Consumer, meta: dict[str, Any], held: dict[str, Any] | None
    ) -> None:
        """Where the loop's feedback is read from: F of the restored snapshot (the fallback
        one's after a fallback), or 0 with no checkpoint (deleted records there stop it)."""
        fed = self._fed
        assert fed is not None
        if self.settings.checkpoint_alignment == "unaligned":
            raise RuntimeError(
                "a job with a loop needs aligned checkpoints (PROCESSOR_CHECKPOINT_ALIGNMENT="
                "aligned): an unaligned snapshot holds no feedback position (docs/loops.md)"
            )
        if held is None:  # nothing processed yet: from the start, which must be there
            check_resume(consumer, fed.tp.topic, fed.tp.partition, 0, 0, STATE_LOST)
            fed.start(0, [])
        else:
            fed.start(position_of(held, self.last_checkpoint), history_of(meta))
        log.info(
            "%s: loop feedback from %s[%d] at %d",
            self.ctx.task_id,
            fed.tp.topic,
            fed.tp.partition,
            fed.position,
        )

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
        write_mark(out, [(t, n, channel) for _, t, n, channel in self._shuffles], mark)

    def _dead_at(self, start: int, offset: int, out: TransactionalOutput) -> None:
        """The chain's dead records from ``start`` on came in the shuffle record at
        ``offset``: that is where they were read. With PROCESSOR_ON_ERROR=stop, the task
        stops at once."""
        assert self.chain is not None
        dead = self.chain.dead
        where = Position(self.topic, self.partition, offset)
        dead[start:] = [replace(d, where=where) for d in dead[start:]]
        if self._dlq.stops:
            self._dlq.failed(out, self.chain.take_dead())

    def _dead_letter(self, out: TransactionalOutput, dead: list[DeadRecord] | None = None) -> None:
        """The dead records so far (``dead``, or the chain's), and those of an aborted
        transaction, into the open one."""
        assert self.chain is not None
        if self._dead_resend:
            self._dlq.failed(out, self._dead_resend, again=True)
            self._dead_in_txn.extend(self._dead_resend)
            self._dead_resend = []
        dead = self.chain.take_dead() if dead is None else dead
        self._dlq.failed(out, dead)
        self._dead_in_txn.extend(dead)

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
        self._finish_checkpoint(out, block=True)
        self._waited_s += time.monotonic() - waiting
        fed = self._fed
        loop = self.stage.feedback
        feedback = None if fed is None or loop is None else (loop.name, self.partition)
        outputs = [(name, channel) for name, _, _, channel in self._shuffles]
        drained = drain(chain, outputs, feedback, operators)
        if checkpoint:
            self._store.start_flush()
        if chain.late:
            self._count_late()
        if drained.oversized:
            self._m_oversized.inc(drained.oversized)
        if drained.dead or self._dead_resend:
            self._dead_letter(out, drained.dead)
        topics = [topic for _, topic, _, _ in self._shuffles]
        segments = self._resend + segments_of(drained, topics, fed.tp.topic if fed else None)
        self._resend = []
        if not segments:
            return
        shipped = ship(out, segments)
        self._records_out += shipped
        self._m_out.inc(shipped)
        self._in_txn.extend(segments)

    def _prepare_rows(self, checkpoint_id: int, out: TransactionalOutput) -> None:
        """The epoch's PostgreSQL rows, prepared before Kafka transaction n commits; the rows
        the database refused into the DLQ, in that transaction."""
        assert self.postgres is not None and self.chain is not None
        written = self.postgres.prepare(checkpoint_id, self.chain, self.ctx.task_id)
        if self.chain.has_dead:
            self._dead_letter(out)
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

    def _layout(self) -> list[list[Any]]:
        """What this task's channel numbers mean (`processor.worker.layout`)."""
        ctx = self.ctx
        # Without the assignment's stage sizes (a test's context) a one-input stage's
        # channels are its upstream's tasks.
        sizes = ctx.parallelism or {u.name: ctx.input_partitions for u in self.stage.upstreams}
        return ctx.graph.channel_layout(self.stage, sizes)
