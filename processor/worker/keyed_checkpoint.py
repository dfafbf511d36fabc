"""The checkpoint side of a keyed task: barrier n aligned, its epoch closed and committed.

When barrier n is aligned on every channel, in order:

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

A snapshot that fails declines checkpoint n (within the tolerance the task goes on); a
fallback restore replays checkpoints up to the committed one without output.
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from processor import faults, metrics
from processor.checkpointing.aligner import (
    NOOP,
    BarrierAligner,
    BarrierHandler,
    BarrierOutcome,
)
from processor.checkpointing.tracker import BarrierTracker
from processor.checkpointing.unaligned import UnalignedTracker
from processor.config import Settings
from processor.engine.chain import DeadRecord, StageChain
from processor.engine.live_state import epoch_value
from processor.engine.time import NO_WATERMARK, Mark
from processor.kafka.output import TransactionalOutput
from processor.models.control import Decline
from processor.models.records import Barrier, decode_barrier, encode_barrier
from processor.plan.stages import Stage
from processor.state.format import STATE_FORMAT
from processor.state.query_gate import link_view
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotAborted, SnapshotInfo, SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.worker.deadletter import DeadLetters
from processor.worker.epoch_out import Segment
from processor.worker.keyed_feedback import SNAPSHOT_KEY as FEEDBACK_KEY
from processor.worker.keyed_feedback import FeedbackInput
from processor.worker.keyed_restore import ShuffleInput, purge_floor
from processor.worker.keyed_time import TaskTime
from processor.worker.layout import META_KEY as LAYOUT_KEY
from processor.worker.priority import KEYED_SYNC
from processor.worker.task import ClosedEpoch, Task

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A checkpoint past its synchronous part: uploading its snapshot, then committing."""

    epoch: ClosedEpoch
    future: Future[SnapshotInfo]
    alignment_s: float
    watermark: int | None = None  # the task's, at the barrier (a timed stage)
    info: SnapshotInfo | None = None  # set once the snapshot is durable and the commit queued
    # The watermark forwarded before this transaction: what downstream has if it is aborted.
    sent_before: Mark | None = None
    view: Path | None = None  # its state for queries, served once it commits (`query_gate`)


class KeyedCheckpoints(Task):
    """A keyed task's checkpoints; `KeyedTask` reads the records and writes the output.

    Set by the task before its first barrier: ``chain``, ``_store``, ``_aligner``,
    ``_consumer``, ``_workdir``, ``_snapshots`` and ``_retainer``."""

    partition: int
    topic: str
    stage: Stage
    chain: StageChain | None
    _input: ShuffleInput
    _shuffles: list[tuple[str, str, int, int]]
    _time: TaskTime
    _dlq: DeadLetters
    _m_bad: Any
    _store: RocksDBStore
    _aligner: BarrierHandler
    _consumer: Consumer
    _workdir: Path
    _retainer: ThreadPoolExecutor
    _fed: FeedbackInput | None

    def _init_checkpoints(self) -> None:
        # Records written into the open transaction (barriers aside): if its snapshot fails
        # it is aborted, and these go out again with the next epoch (see _snapshot_failed).
        self._in_txn: list[Segment] = []
        self._resend: list[Segment] = []
        self._dead_in_txn: list[DeadRecord] = []  # the same, for the dead records
        self._dead_resend: list[DeadRecord] = []
        self._snapshot_failures = 0  # in a row
        # After a fallback restore to snapshot m (`_replay_from`), the checkpoints up to the
        # committed one (`_replay_to`) are aligned again and their records go into the state
        # without output (see `keyed_restore.restore_snapshot`). 0: no replay.
        self._replay_from = 0
        self._replay_to = 0
        self._pending: _Pending | None = None
        self._snapshots: SnapshotProcess | None = None
        self._align_started: float | None = None
        self._waited_s = 0.0  # this epoch's waits for the previous checkpoint to finish

    # What the task itself does at a checkpoint (keyed.py).
    def _flush(
        self, out: TransactionalOutput, checkpoint: bool = False, operators: bool = True
    ) -> None:
        raise NotImplementedError

    def _tick(self, triggered_at_ms: int, quiet: bool = False) -> None:
        raise NotImplementedError

    def _send_watermark(self, out: TransactionalOutput | None) -> None:
        raise NotImplementedError

    def _layout(self) -> list[list[Any]]:
        raise NotImplementedError

    def _prepare_rows(self, checkpoint_id: int, out: TransactionalOutput) -> None:
        raise NotImplementedError

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
        if self._fed is not None:
            self._fed.at_barrier(chain, checkpoint_id, quiet=True)
        self._tick(triggered_at_ms, quiet=True)
        chain.flush(quiet=True)  # into every operator's state; no output, no dead records
        chain.late.clear()
        if self.stage.timed:
            self._send_watermark(None)
        if checkpoint_id >= self._replay_to:
            self._replay_to = self._replay_from = 0
            self._serve_committed(checkpoint_id)
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
        # The CPU-bound part: the worker's source threads step aside meanwhile (`priority`).
        with KEYED_SYNC.held():
            fed = self._fed
            if fed is not None:  # the loop's records fed back since the last barrier: epoch n's
                assert self.chain is not None
                self._records_in += fed.at_barrier(self.chain, checkpoint_id, quiet=False)
            positions = {str(u): off for (_, u), off in outcome.positions.items()}
            resume = self._aligner.resume_offsets()[self.partition]
            assert self._snapshots is not None
            # The snapshot holds the positions; the metadata only names it, so its size does not
            # grow with the input's partitions (the broker's offset.metadata.max.bytes is 4096).
            committed: dict[str, Any] = {
                "checkpoint": checkpoint_id,
                "snapshot": self._snapshots.owner,
            }
            if fed is not None:
                committed |= fed.commit_meta()
            meta = json.dumps(committed, separators=(",", ":"))
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
            if self.postgres is not None:
                self._prepare_rows(checkpoint_id, out)
            self._dlq.tick()
            sent_before = self._time.sent
            if self.stage.timed:
                self._send_watermark(out)
            for _, topic, partitions, channel in self._shuffles:
                value, headers = encode_barrier(Barrier(checkpoint_id, channel, triggered_at_ms))
                for p in range(partitions):
                    out.produce(topic, value, partition=p, headers=headers)
            flush_cpu_s = time.thread_time() - flush_started_cpu
            local = self._workdir / f"chk-{checkpoint_id}"
            view: Path | None = None
            try:
                store.checkpoint(local)
                if self.ctx.query is not None:  # before the upload takes `local` away
                    view = link_view(local, self._workdir / f"query-{checkpoint_id}")
            except Exception as exc:  # noqa: BLE001 - local disk trouble: decline, maybe tolerate
                if view is not None:
                    shutil.rmtree(view, ignore_errors=True)
                self._snapshot_failed(checkpoint_id, exc, out, sent_before)
                return
        held: dict[str, Any] = {
            "positions": positions,
            "state": STATE_FORMAT,
            LAYOUT_KEY: self._layout(),
        }
        if self.stage.timed:
            assert self.chain is not None
            held |= self._time.snapshot_meta(self.chain)
        if fed is not None:
            held |= fed.snapshot_meta()
        future = self._snapshots.upload(checkpoint_id, local, held)
        lag = self._lag(consumer)
        self._waited_s = 0.0
        epoch = self._close_epoch(
            checkpoint_id, started, waited_before, flush_cpu_s, lag, positions
        )
        current = self._time.watermarks.current
        watermark = current if self.stage.timed and current > NO_WATERMARK else None
        self._pending = _Pending(
            epoch, future, alignment_s, watermark, sent_before=sent_before, view=view
        )
        metrics.state_keys.labels(**self.labels).set(store.approximate_keys())

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
                if pending.view is not None:  # its transaction is aborted: never served
                    shutil.rmtree(pending.view, ignore_errors=True)
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
        if self.postgres is not None:
            self.postgres.commit(pending.epoch.checkpoint_id, self.ctx.task_id)
        self._in_txn.clear()
        self._dead_in_txn.clear()
        self._snapshot_failures = 0
        metrics.snapshot_failures_in_a_row.labels(**self.labels).set(0)
        self.last_checkpoint = pending.epoch.checkpoint_id
        if self.ctx.query is not None:
            self.ctx.query.committed(self.last_checkpoint, pending.view, self._store, self._epoch)
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

    def _stop_postgres(self, out: TransactionalOutput) -> None:
        """A clean stop: the checkpoint in flight finished (committed, or declined if its
        snapshot fails), the open transaction aborted, then no PostgreSQL transaction of the
        task stays prepared (`PostgresSinks.settle`)."""
        if self.postgres is None:
            return
        self._finish_checkpoint(out, block=True)
        out.abort()
        self.postgres.settle(self.last_checkpoint)

    def _serve_committed(self, checkpoint_id: int) -> None:
        """After a restore (or a fallback's replay), the state in RocksDB is checkpoint
        ``checkpoint_id``'s, committed: requests may read it (0: nothing committed yet, so
        no key has a committed value). Checkpoints taken later are served as they commit."""
        gate = self.ctx.query
        if gate is None:
            return
        view: Path | None = None
        if checkpoint_id:
            view = self._workdir / f"query-{checkpoint_id}"
            self._store.checkpoint(view)
        gate.committed(checkpoint_id, view, self._store, self._epoch)

    def _epoch(self, store_key: bytes) -> tuple[bool, bytes | None]:
        """What this epoch holds in memory for a key (a ``fresh`` request's newest value)."""
        chain = self.chain
        return (False, None) if chain is None else epoch_value(chain, store_key)

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
        start, see `keyed_restore.restore_snapshot`).
        """
        purger = self.ctx.purger
        if purger is None or not purger.due(self.partition):
            return
        below = purge_floor(self._input, kept)
        if below is not None:
            purger.purge_below(self.partition, below)
        fed_purger = self.ctx.feedback_purger
        if self._fed is not None and fed_purger is not None and fed_purger.due(self.partition):
            # Fed-back records below every retained snapshot's F are never read again.
            positions = [f for m in kept if type(f := m.get(FEEDBACK_KEY)) is int]
            if positions and len(positions) == len(kept):
                fed_purger.purge_below(self.partition, min(positions))

    def _snapshot_failed(
        self,
        checkpoint_id: int,
        exc: Exception,
        out: TransactionalOutput,
        sent_before: Mark | None,
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
        if self.postgres is not None:  # its rows go again, in the next epoch's transaction
            assert self.chain is not None
            self.postgres.decline(checkpoint_id, self.chain)
        if out.transactional:  # else they are out already
            self._resend = self._in_txn + self._resend
            self._dead_resend = self._dead_in_txn + self._dead_resend
            # Its watermark record is aborted too: downstream still has the one before.
            self._time.sent = sent_before
        self._in_txn = []
        self._dead_in_txn = []

    def _lag(self, consumer: Consumer) -> int:
        tp = TopicPartition(self.topic, self.partition)
        _, high = consumer.get_watermark_offsets(tp, timeout=1, cached=True)
        position = consumer.position([tp])[0].offset
        lag = max(0, high - position) if high >= 0 and position >= 0 else 0
        metrics.consumer_lag.labels(**self.labels, partition=str(self.partition)).set(lag)
        if self._fed is not None:  # a job whose loop still feeds records back is not idle
            lag += self._fed.lag()
        return lag


def barrier_handler(settings: Settings) -> type[BarrierHandler]:
    if settings.guarantee == "at_least_once":
        return BarrierTracker  # never hold a channel back; records may count twice
    if settings.checkpoint_alignment == "unaligned":
        return UnalignedTracker
    return BarrierAligner
