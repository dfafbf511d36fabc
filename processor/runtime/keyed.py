"""Keyed task: one partition of a keyed stage's shuffle, its operators' state in RocksDB,
aligned on the barriers of every upstream task (channel).

Epoch n (the records between barriers n-1 and n) runs through the stage's `StageChain`:
aggregations keep each key's latest value of the epoch in memory, ``process`` updates its
state cache and emits at once. When barrier n is aligned, in order:

1. the chain is flushed: state to RocksDB (one WriteBatch); the aggregations' latest values,
   sink records and downstream shuffle records to Kafka inside transaction n, then barrier n
   into every downstream shuffle partition; the input positions at barrier n are sent into
   the transaction (in the background);
2. a RocksDB checkpoint is taken synchronously: the memtable flush, started in RocksDB's
   thread right after the state write, is waited for with the GIL free (the other task
   threads of the worker run meanwhile), then hard links (milliseconds);
3. the copy to checkpoint storage runs in the background while epoch n+1 is processed, in
   the task's snapshot process (`SnapshotProcess`: its file I/O never waits for the GIL);
4. only when the copy is durable is transaction n committed (in the background too), then
   acknowledged.

In a timed pipeline watermark records arrive beside the barriers: the task's watermark (the
minimum over its channels, `processor.pipeline.time`) closes windows and expires join
records as it rises, is forwarded downstream at each checkpoint, and its per-channel values
are part of the snapshot.

Transaction n+1 begins after n commits, so output of epoch n+1 waits in the chain: an
aggregation writes every key once per epoch with its latest value (last = exact).
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor import faults, metrics
from processor.checkpointing.aligner import (
    NOOP,
    BarrierAligner,
    BarrierHandler,
    BarrierOutcome,
    Channel,
    Verdict,
)
from processor.checkpointing.tracker import BarrierTracker
from processor.checkpointing.unaligned import UnalignedTracker
from processor.config import Settings
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput, open_output
from processor.models.control import Decline
from processor.models.records import (
    Barrier,
    Watermark,
    control_kind,
    decode_barrier,
    decode_shuffle,
    decode_watermark,
    encode_barrier,
    encode_watermark,
)
from processor.pipeline.chain import DeadRecord, StageChain
from processor.pipeline.dead import Position
from processor.pipeline.floors import Floors
from processor.pipeline.time import NO_WATERMARK, ChannelWatermarks
from processor.runtime.deadletter import DeadLetters
from processor.runtime.gaps import STATE_LOST, check_resume
from processor.runtime.layout import META_KEY as LAYOUT_KEY
from processor.runtime.layout import check_snapshot as check_layout
from processor.runtime.task import (
    ClosedEpoch,
    Task,
    TaskContext,
    check,
    commit_metadata,
    committed_after_fencing,
    local_dir,
    output_partitions,
)
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotAborted, SnapshotInfo, SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.state.savepoints import inherited_floors, open_savepoint
from processor.state.storage import SnapshotMissing

# Records for one topic: by key (partition None, a sink) or into one partition (a shuffle).
# A sink's records are (key, value), or (key, value, headers) from a sink with headers.
_Segment = tuple[str, int | None, list[Any]]
# The last watermark forwarded downstream: (time, idle).
_Mark = tuple[int, bool]

log = logging.getLogger(__name__)

_PROCESS = Verdict.PROCESS

# Written into every snapshot's metadata: the layout of the state inside (keys
# ``<operator>\0<key>``, JSON values). A snapshot without it is of an older version, whose
# state would be misread.
STATE_FORMAT = "pipeline-1"

# confluent-kafka types Message accessors as Optional; for a message whose error() is None,
# value() and offset() are set, so the hot path below does not test them again.


@dataclass
class _Pending:
    """A checkpoint past its synchronous part: uploading its snapshot, then committing."""

    epoch: ClosedEpoch
    future: Future[SnapshotInfo]
    alignment_s: float
    watermark: int | None = None  # the task's, at the barrier (a timed stage)
    info: SnapshotInfo | None = None  # set once the snapshot is durable and the commit queued
    # The watermark forwarded before this transaction: what downstream has if it is aborted.
    sent_before: _Mark | None = None


class KeyedTask(Task):
    def __init__(self, ctx: TaskContext, partition: int) -> None:
        super().__init__(ctx)
        self.partition = partition
        stage = ctx.stage
        self.stage = stage
        self.topic = ctx.graph.shuffle_topic(stage)
        # Downstream shuffles: (key_by name, topic, partitions, this task's channel in it).
        self._shuffles = self.shuffle_outputs()
        self._watermarks = ChannelWatermarks(ctx.input_partitions)
        self._sent_mark: _Mark | None = None  # the last watermark forwarded
        # A join's channels: which input (0 left, 1 right) each belongs to.
        self._sides = (
            [ctx.graph.side_of(stage, u, ctx.parallelism) for u in range(ctx.input_partitions)]
            if stage.is_join
            else []
        )
        self.chain: StageChain | None = None  # once the state is restored
        # Records written into the open transaction (barriers aside): if its snapshot fails
        # it is aborted, and these go out again with the next epoch (see _snapshot_failed).
        self._in_txn: list[_Segment] = []
        self._resend: list[_Segment] = []
        self._dead_in_txn: list[DeadRecord] = []  # the same, for the dead records
        self._dead_resend: list[DeadRecord] = []
        self._snapshot_failures = 0  # in a row
        # After a fallback restore to snapshot m (`_replay_from`), the checkpoints up to the
        # committed one (`_replay_to`) are aligned again and their records go into the state
        # without output (see _restore_snapshot). 0: no replay.
        self._replay_from = 0
        self._replay_to = 0
        self._pending: _Pending | None = None
        self._snapshots: SnapshotProcess | None = None
        self._align_started: float | None = None
        self._waited_s = 0.0  # this epoch's waits for the previous checkpoint to finish
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
        store: RocksDBStore | None = None
        try:
            # Started first: the child's start-up overlaps the fencing below.
            task_id = self.ctx.task_id
            self._snapshots = SnapshotProcess(s, f"{s.job_name}/{task_id}", task_id)
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
        finally:
            # A failed (perhaps fenced) task must not go on writing to storage: stop the
            # upload under way and drop the queued ones, retention above all.
            if self._snapshots is not None:
                self._snapshots.close()
            self._retainer.shutdown(wait=True, cancel_futures=True)
            out.close()
            consumer.close()
            if store is not None:
                store.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def _restore(self, consumer: Consumer) -> RocksDBStore:
        tp = committed_after_fencing(self.settings, [TopicPartition(self.topic, self.partition)])[0]
        meta = commit_metadata(tp)
        self.last_checkpoint = int(meta.get("checkpoint", 0))
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
            info = self._restore_snapshot(committed, db_path, low)
            check_layout(info.meta, self._layout(), info.ref.checkpoint_id)
            positions = self._positions(info)
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
            info_meta = self._load_savepoint(db_path)
        store = RocksDBStore(db_path)
        s = self.settings
        self.chain = StageChain(
            self.ctx.graph.plan,
            self.stage,
            self.partition,
            store,
            {n.name: s.shuffle_partitions for n in self.stage.shuffles},
            s.max_key_bytes,
            self.ctx.graph.late_topic,
            s.combine,
            clients.record_limit(s),
        )
        self._store = store
        if self.stage.timed:
            self._restore_time(store, info_meta)
        for prefix in self.chain.timed_operators():  # windows', joins', process timers
            self.chain.restore_timers(prefix, store.items(prefix))
        channels = [(self.partition, u) for u in range(self.ctx.input_partitions)]
        # A replay aligns the barriers after the fallback snapshot again, as the first run did.
        aligned_to = self._replay_from if self._replay_to else self.last_checkpoint
        self._aligner = _barrier_handler(s)(channels, positions, aligned_to)
        start = self._aligner.resume_offsets()[self.partition]
        check_resume(consumer, self.topic, self.partition, start, self.last_checkpoint, STATE_LOST)
        consumer.assign([TopicPartition(self.topic, self.partition, start)])
        log.info("%s: resuming %s[%d] at %d", self.ctx.task_id, self.topic, self.partition, start)
        return store

    def _restore_time(self, store: RocksDBStore, meta: dict[str, Any]) -> None:
        """The channels' watermarks from the snapshot."""
        marks = meta.get("watermarks")
        if isinstance(marks, dict):
            self._watermarks.restore(marks)
        assert self.chain is not None
        self.chain.watermark = self._watermarks.current
        self._sent_mark = _restored_mark(meta.get("sent_watermark"))
        if self._sent_mark is None and self._watermarks.current > NO_WATERMARK:
            # A snapshot of an older version, which did not record it.
            self._sent_mark = (self._watermarks.current, False)
        self.chain.inherit(Floors.from_json(meta.get("floors")))

    def _load_savepoint(self, db_path: Path) -> dict[str, Any]:
        """A job's first start from a savepoint: this partition's keys of the stage's
        operators, from every saved task (the partition count may have changed); the
        shuffle, new with the job, is read from its start. Returns the time metadata to
        start from: the saved tasks' watermarks as lateness floors."""
        started = time.monotonic()
        store, savepoint = open_savepoint(self.settings)
        operators = [n.name for n in self.stage.stateful]
        metas: dict[str, dict[str, Any]] = {}
        keys = store.load_partition(
            savepoint, operators, self.partition, self.settings.shuffle_partitions, db_path, metas
        )
        log.info(
            "%s: loaded %d keys from savepoint %s (checkpoint %d of job %s) in %.3fs",
            self.ctx.task_id,
            keys,
            self.settings.from_savepoint,
            savepoint.checkpoint_id,
            savepoint.job,
            time.monotonic() - started,
        )
        return {"floors": inherited_floors(savepoint, metas, operators)}

    def _positions(self, info: SnapshotInfo) -> dict[Channel, int]:
        """The channel positions a snapshot holds the records up to."""
        try:
            return self._positions_of(info.meta)
        except SnapshotMissing as exc:
            raise SnapshotMissing(f"checkpoint {info.ref}: {exc}") from None

    def _positions_of(self, meta: dict[str, Any]) -> dict[Channel, int]:
        if meta.get("state") != STATE_FORMAT:
            raise SnapshotMissing(
                f"its state format is {meta.get('state')!r}, not {STATE_FORMAT!r} "
                "(written by an older version?)"
            )
        try:
            raw = meta["positions"]
            return {(self.partition, int(u)): int(off) for u, off in raw.items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SnapshotMissing("no channel positions") from None

    def _restore_snapshot(
        self, committed: SnapshotRef, db_path: Path, log_start: int
    ) -> SnapshotInfo:
        """Restore the committed snapshot, or an older one that can stand in for it.

        Any complete snapshot m older than the committed checkpoint n can: both hold exactly
        the records up to their barrier (m, n) on every channel, and barrier m precedes
        barrier n on each. So m plus the records from barrier m to barrier n is the committed
        state. Those records are replayed into the state *without output*, since their output
        is committed already; each channel's replay ends at its barrier n, which is a fact of
        the log rather than of how the reads were batched. A snapshot whose records were
        purged from the shuffle (below ``log_start``) cannot be replayed and does not count.
        Without such a snapshot the task fails with the reason, and never guesses.
        """
        assert self._snapshots is not None
        try:
            return self._snapshots.restore(committed, db_path)
        except SnapshotMissing as exc:
            problem = str(exc)
        log.error("%s: %s", self.ctx.task_id, problem)
        if self.settings.checkpoint_alignment == "unaligned":
            # The replay would have to end at the committed snapshot's own positions: the
            # ones that are lost with it (see checkpointing/unaligned.py).
            raise SnapshotMissing(f"{problem}; unaligned checkpoints do not fall back")
        for older in reversed(self._snapshots.snapshots()):
            if older.checkpoint_id >= committed.checkpoint_id:
                continue
            try:
                # Nothing reused: an older generation's retention need not keep these files.
                info = self._snapshots.restore(older, db_path, reuse=False)
                held = self._positions(info)
                resume = min(held.values(), default=-1) + 1
                if len(held) < self.ctx.input_partitions or resume < log_start:
                    raise SnapshotMissing(
                        f"checkpoint {older} resumes below {self.topic}[{self.partition}]'s "
                        f"log start {log_start}: its records were purged"
                    )
            except SnapshotMissing as exc:
                log.error("%s: %s", self.ctx.task_id, exc)
                shutil.rmtree(db_path, ignore_errors=True)
                continue
            log.warning(
                "%s: falling back to checkpoint %s; replaying up to barrier %d of every "
                "channel without output (it is committed already)",
                self.ctx.task_id,
                older,
                committed.checkpoint_id,
            )
            self._replay_from = older.checkpoint_id
            self._replay_to = committed.checkpoint_id
            return info
        raise SnapshotMissing(f"{problem}; no older snapshot can stand in for it")

    def _process(self, msgs: list[Message], out: TransactionalOutput, consumer: Consumer) -> None:
        chain = self.chain
        assert chain is not None
        admit = self._aligner.admit
        partition = self.partition
        channels = self.ctx.input_partitions
        combined = self.stage.combiner is not None
        widths, sides = self.stage.pair_widths, self._sides
        # Only right after a fallback restore: a replayed record's output is committed
        # already, so it goes into the state only.
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
        self._records_in += applied
        self._m_in.inc(applied)
        if chain.late:
            self._count_late()
        # Dead records wait for the flush like the other output: the open transaction may be
        # the previous epoch's, still waiting for its snapshot. No early flush while
        # replaying: what is in a transaction must not be changed quietly afterwards
        # (checkpoint n+1 can only complete after the replay).
        if chain.buffered >= self.settings.flush_keys and not self._replay_to:
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
        risen = self._watermarks.on_mark(mark.channel, mark.time_ms, mark.idle)
        if risen is not None:
            assert self.chain is not None
            self.chain.advance(risen, quiet=self._replay_to > 0)
            metrics.watermark_ms.labels(**self.labels).set(risen)

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
        # Held back to what the stage's windows may still emit (StageChain.output_watermark).
        current = self.chain.output_watermark
        idle = self._watermarks.all_idle
        if current <= NO_WATERMARK and not idle:
            return
        mark = (current, idle)
        if mark == self._sent_mark:
            return
        self._sent_mark = mark
        if out is None:
            return
        if current > NO_WATERMARK:
            lag = max(0.0, time.time() - current / 1000)
            metrics.event_time_lag_seconds.labels(**self.labels).set(lag)
        for _, topic, partitions, channel in self._shuffles:
            value, headers = encode_watermark(Watermark(channel, current, idle))
            for p in range(partitions):
                out.produce(topic, value, partition=p, headers=headers)

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

    def _dead_letter(self, out: TransactionalOutput) -> None:
        """The dead records so far (and those of an aborted transaction) into the open one."""
        assert self.chain is not None
        if self._dead_resend:
            self._dlq.failed(out, self._dead_resend, again=True)
            self._dead_in_txn.extend(self._dead_resend)
            self._dead_resend = []
        dead = self.chain.take_dead()
        self._dlq.failed(out, dead)
        self._dead_in_txn.extend(dead)

    def _flush(self, out: TransactionalOutput, checkpoint: bool = False) -> None:
        """The epoch so far: state -> RocksDB, output -> the open transaction.

        ``checkpoint``: a snapshot follows, so the memtable flush starts right after the
        state write and runs in RocksDB's thread while the output is produced."""
        chain = self.chain
        assert chain is not None
        # The previous epoch's transaction must be closed (time the checkpoint is charged with).
        waiting = time.monotonic()
        self._finish_checkpoint(out, block=True)
        self._waited_s += time.monotonic() - waiting
        chain.flush()
        if checkpoint:
            self._store.start_flush()
        segments = self._resend
        self._resend = []
        for topic, items in chain.take_sinks().items():
            segments.append((topic, None, items))
        for topic, headed in chain.take_headed().items():
            segments.append((topic, None, headed))
        if chain.late:
            self._count_late()
        for name, topic, _, channel in self._shuffles:
            shuffle = chain.shuffles[name]
            segments.extend((topic, p, [(None, v)]) for p, v in shuffle.take(channel))
            if shuffle.oversized:
                self._m_oversized.inc(shuffle.oversized)
                shuffle.oversized = 0
        if chain.has_dead or self._dead_resend:
            self._dead_letter(out)
        if not segments:
            return
        shipped = 0
        for topic, partition, items in segments:
            if partition is None:
                out.produce_many(topic, items)  # sink records: no per-record keyword dicts
            else:
                for key, value in items:
                    out.produce(topic, value, key=key, partition=partition)
            shipped += len(items)
        self._records_out += shipped
        self._m_out.inc(shipped)
        self._in_txn.extend(segments)

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
            self.ctx.report(
                Decline(
                    self.ctx.task_id,
                    outcome.aborted,
                    f"overtaken by barrier {barrier.checkpoint_id}",
                )
            )
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
        self._tick(triggered_at_ms, quiet=True)
        chain.flush()  # quiet operators emit nothing, dead records included
        chain.late.clear()
        if self.stage.timed:
            self._send_watermark(None)
        if checkpoint_id >= self._replay_to:
            self._replay_to = self._replay_from = 0
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
        store = self._store
        checkpoint_id = outcome.completed
        assert checkpoint_id is not None
        faults.reach("barrier_aligned", self.ctx.task_id)
        metrics.alignment_seconds.labels(**self.labels).observe(alignment_s)
        started = (time.monotonic(), time.thread_time())
        waited_before = self._waited_s
        # Close checkpoint n-1 first: if it is declined, what it carried must go out again in
        # transaction n, with the offsets that move past it.
        self._finish_checkpoint(out, block=True)
        positions = {str(u): off for (_, u), off in outcome.positions.items()}
        resume = self._aligner.resume_offsets()[self.partition]
        assert self._snapshots is not None
        # The snapshot holds the positions; the metadata only names it, so its size does not
        # grow with the input's partitions (the broker's offset.metadata.max.bytes is 4096).
        meta = json.dumps({"checkpoint": checkpoint_id, "snapshot": self._snapshots.owner})
        task_id = self.ctx.task_id
        # Its round trips overlap the flush, the RocksDB checkpoint and the upload.
        out.send_offsets_async(
            [TopicPartition(self.topic, self.partition, resume, metadata=meta)],
            consumer,
            then=lambda: faults.reach("offsets_sent", task_id),
        )
        flush_started_cpu = time.thread_time()
        self._tick(triggered_at_ms)
        self._flush(out, checkpoint=True)
        self._dlq.tick()
        sent_before = self._sent_mark
        if self.stage.timed:
            self._send_watermark(out)
        for _, topic, partitions, channel in self._shuffles:
            value, headers = encode_barrier(Barrier(checkpoint_id, channel, triggered_at_ms))
            for p in range(partitions):
                out.produce(topic, value, partition=p, headers=headers)
        flush_cpu_s = time.thread_time() - flush_started_cpu
        local = self._workdir / f"chk-{checkpoint_id}"
        try:
            store.checkpoint(local)
        except Exception as exc:  # noqa: BLE001 - local disk trouble: decline, maybe tolerate
            self._snapshot_failed(checkpoint_id, exc, out, sent_before)
            return
        future = self._snapshots.upload(
            checkpoint_id,
            local,
            {
                "positions": positions,
                "state": STATE_FORMAT,
                LAYOUT_KEY: self._layout(),
                **self._time_meta(),
            },
        )
        lag = self._lag(consumer)
        self._waited_s = 0.0
        epoch = self._close_epoch(
            checkpoint_id, started, waited_before, flush_cpu_s, lag, positions
        )
        current = self._watermarks.current
        watermark = current if self.stage.timed and current > NO_WATERMARK else None
        self._pending = _Pending(epoch, future, alignment_s, watermark, sent_before=sent_before)
        metrics.state_keys.labels(**self.labels).set(store.approximate_keys())

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
        """What this task's channel numbers mean (`processor.runtime.layout`)."""
        ctx = self.ctx
        # Without the assignment's stage sizes (a test's context) a one-input stage's
        # channels are its upstream's tasks.
        sizes = ctx.parallelism or {u.name: ctx.input_partitions for u in self.stage.upstreams}
        return ctx.graph.channel_layout(self.stage, sizes)

    def _time_meta(self) -> dict[str, Any]:
        """The channels' watermarks, for the snapshot (timed stages only)."""
        if not self.stage.timed:
            return {}
        assert self.chain is not None
        floors = self.chain.floors  # inherited from a savepoint, until the watermark passes
        sent = None if self._sent_mark is None else list(self._sent_mark)
        return {
            "watermarks": self._watermarks.snapshot(),
            "sent_watermark": sent,
            **({"floors": floors.to_json()} if floors is not None else {}),
        }

    def _finish_checkpoint(self, out: TransactionalOutput, block: bool) -> None:
        """Commit the checkpoint whose snapshot is durable; acknowledge it once committed.

        ``block``: wait for both rather than look whether they are done.
        """
        pending = self._pending
        if pending is None:
            return
        if pending.info is None:
            if not block and not pending.future.done():
                return
            try:
                pending.info = pending.future.result()
            except Exception as exc:  # noqa: BLE001 - storage trouble: decline, maybe tolerate
                self._pending = None
                self._snapshot_failed(pending.epoch.checkpoint_id, exc, out, pending.sent_before)
                return
            faults.reach("snapshot_durable", self.ctx.task_id)
            out.commit_async()
        commit_s = out.commit_finished(block)
        if commit_s is None:
            return
        self._pending = None
        info = pending.info
        faults.reach("committed", self.ctx.task_id)
        self._in_txn.clear()
        self._dead_in_txn.clear()
        self._snapshot_failures = 0
        metrics.snapshot_failures_in_a_row.labels(**self.labels).set(0)
        self.last_checkpoint = pending.epoch.checkpoint_id
        metrics.snapshot_upload_seconds.labels(**self.labels).observe(info.duration_s)
        metrics.transaction_commit_seconds.labels(**self.labels).observe(commit_s)
        metrics.state_size_bytes.labels(**self.labels).set(info.full_bytes)
        if self.settings.checkpoint_alignment == "unaligned":
            # Snapshotted at the first barrier, the lag then counted the other channels'
            # barriers of the same checkpoint, still unread: an idle job never looked idle.
            pending.epoch.lag = self._lag(self._consumer)
        self.ctx.report(
            pending.epoch.ack(
                self.ctx,
                commit_s,
                state_bytes=info.full_bytes,
                uploaded_bytes=info.uploaded_bytes,
                alignment_s=round(pending.alignment_s, 6),
                upload_s=round(info.duration_s, 6),
                snapshot=info.ref.owner,
                watermark_ms=pending.watermark,
            )
        )
        self._retainer.submit(self._retain, info.ref)

    def _retain(self, committed: SnapshotRef) -> None:
        assert self._snapshots is not None
        try:
            kept = self._snapshots.retain(committed, self.settings.retained_checkpoints).result()
        except SnapshotAborted:
            return  # the task is ending
        except Exception as exc:  # noqa: BLE001 - old snapshots stay; the next commit tries again
            log.warning("%s: could not delete old snapshots: %s", self.ctx.task_id, exc)
            return
        self._purge(list(kept.values()))

    def _purge(self, kept: list[dict[str, Any]]) -> None:
        """Shuffle records below where every retained snapshot resumes are never read again.

        The retained snapshots are the committed one and its fallbacks; a restore only ever
        resumes at one of them (a fallback skips any other snapshot it finds below the log
        start, see _restore_snapshot).
        """
        purger = self.ctx.purger
        if purger is None or not purger.due(self.partition):
            return
        below: int | None = None
        for meta in kept:
            try:
                positions = self._positions_of(meta)
            except SnapshotMissing:
                return
            resume = min(positions.values(), default=-1) + 1
            if len(positions) < self.ctx.input_partitions:
                resume = 0  # a channel it has no position for resumes at the start
            below = resume if below is None else min(below, resume)
        if below is not None:
            purger.purge_below(self.partition, below)

    def _snapshot_failed(
        self,
        checkpoint_id: int,
        exc: Exception,
        out: TransactionalOutput,
        sent_before: _Mark | None,
    ) -> None:
        """Decline checkpoint n; within the tolerance, go on as if barrier n never came.

        Transaction n must not commit (its snapshot is not durable), so it is aborted, and
        the records it carried (not its barriers) are written again into transaction n+1,
        before that epoch's own: the state they came from is in RocksDB already and the next
        snapshot includes it.
        """
        self._snapshot_failures += 1
        tolerated = self.settings.tolerable_checkpoint_failures
        reason = f"snapshot failed: {type(exc).__name__}: {exc}"
        metrics.snapshot_failures.labels(**self.labels).inc()
        metrics.snapshot_failures_in_a_row.labels(**self.labels).set(self._snapshot_failures)
        log.warning(
            "%s: checkpoint %d declined, %s (%d in a row, %d tolerated)",
            self.ctx.task_id,
            checkpoint_id,
            reason,
            self._snapshot_failures,
            tolerated,
        )
        self.ctx.report(Decline(self.ctx.task_id, checkpoint_id, reason))
        if self._snapshot_failures > tolerated:
            raise RuntimeError(
                f"{self._snapshot_failures} checkpoints in a row failed "
                f"(PROCESSOR_TOLERABLE_CHECKPOINT_FAILURES={tolerated}): {reason}"
            ) from exc
        out.abort()
        if out.transactional:  # else they are out already
            self._resend = self._in_txn + self._resend
            self._dead_resend = self._dead_in_txn + self._dead_resend
            # Its watermark record is aborted too: downstream still has the one before.
            self._sent_mark = sent_before
        self._in_txn = []
        self._dead_in_txn = []

    def _lag(self, consumer: Consumer) -> int:
        tp = TopicPartition(self.topic, self.partition)
        _, high = consumer.get_watermark_offsets(tp, timeout=1, cached=True)
        position = consumer.position([tp])[0].offset
        lag = max(0, high - position) if high >= 0 and position >= 0 else 0
        metrics.consumer_lag.labels(**self.labels, partition=str(self.partition)).set(lag)
        return lag


def _restored_mark(raw: Any) -> _Mark | None:
    """The forwarded watermark a snapshot recorded (``[time, idle]``), if any."""
    if isinstance(raw, list) and len(raw) == 2 and type(raw[0]) is int:
        return (raw[0], bool(raw[1]))
    return None


def _barrier_handler(settings: Settings) -> type[BarrierHandler]:
    if settings.guarantee == "at_least_once":
        return BarrierTracker  # never hold a channel back; records may count twice
    if settings.checkpoint_alignment == "unaligned":
        return UnalignedTracker
    return BarrierAligner
