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

Step 1 is the task's (`KeyedTask._checkpoint`, writing through its `EpochWriter`); the
rest is `KeyedCheckpoints`, an object the task owns.
"""

from __future__ import annotations

import json
import logging
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from processor import faults, metrics
from processor.engine.chain import StageChain
from processor.engine.live_state import epoch_value
from processor.engine.time import NO_WATERMARK, Mark
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput
from processor.models.control import Decline
from processor.state.format import STATE_FORMAT
from processor.state.query_gate import link_view
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotAborted, SnapshotInfo, SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.worker.keyed_epoch import EpochWriter
from processor.worker.keyed_feedback import SNAPSHOT_KEY as FEEDBACK_KEY
from processor.worker.keyed_feedback import FeedbackInput
from processor.worker.keyed_restore import ShuffleInput, purge_floor
from processor.worker.keyed_time import TaskTime
from processor.worker.layout import META_KEY as LAYOUT_KEY
from processor.worker.task import ClosedEpoch, TaskContext

if TYPE_CHECKING:
    from processor.sinks.postgres.writer import PostgresSinks

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


@dataclass(frozen=True)
class LocalState:
    """Where a keyed task's state lives: RocksDB in the task's own directory, snapshots
    through its snapshot process, old snapshots deleted in the background."""

    store: RocksDBStore
    workdir: Path
    snapshots: SnapshotProcess
    retainer: ThreadPoolExecutor


class KeyedCheckpoints:
    """A keyed task's checkpoints from the snapshot on: the snapshot taken and uploaded,
    transaction n committed once it is durable, then acknowledged; a failed one declined
    and its records written again (`EpochWriter.aborted`); old snapshots retained and the
    shuffle purged below them; the committed state served to queries.

    The task closes the epoch (`KeyedTask`); this object owns what follows."""

    def __init__(
        self,
        ctx: TaskContext,
        shuffle: ShuffleInput,
        local: LocalState,
        chain: StageChain,
        writer: EpochWriter,
        time: TaskTime,
        fed: FeedbackInput | None,
        postgres: PostgresSinks | None,
        consumer: Consumer,
        start: int,
    ) -> None:
        self.ctx = ctx
        self.labels = {"job_name": ctx.settings.job_name, "task": ctx.task_id}
        self._shuffle = shuffle
        self._local = local
        self._chain = chain
        self._writer = writer
        self._time = time
        self._fed = fed
        self._consumer = consumer  # the task's, of its shuffle partition
        self._start = start  # where it was assigned
        self._postgres = postgres
        self.pending: _Pending | None = None
        self._failures = 0  # snapshots failed in a row

    def send_offsets(self, out: TransactionalOutput, checkpoint_id: int, resume: int) -> None:
        """Checkpoint n's input position into its transaction, in the background: its round
        trips overlap the flush, the RocksDB checkpoint and the upload. The snapshot holds
        the channel positions; the metadata only names it, so its size does not grow with
        the input's partitions (the broker's offset.metadata.max.bytes is 4096)."""
        committed: dict[str, Any] = {
            "checkpoint": checkpoint_id,
            "snapshot": self._local.snapshots.owner,
        }
        if self._fed is not None:
            committed |= self._fed.commit_meta()
        meta = json.dumps(committed, separators=(",", ":"))
        task_id = self.ctx.task_id
        tp = TopicPartition(self._shuffle.topic, self._shuffle.partition, resume, metadata=meta)
        out.send_offsets_async(
            [tp], self._consumer, then=lambda: faults.reach("offsets_sent", task_id)
        )

    def take(
        self, checkpoint_id: int, out: TransactionalOutput, sent_before: Mark | None
    ) -> tuple[Path, Path | None] | None:
        """The RocksDB checkpoint of epoch n, and its hard-linked view for queries; None if
        the local disk failed it (declined)."""
        local = self._local.workdir / f"chk-{checkpoint_id}"
        view: Path | None = None
        try:
            self._local.store.checkpoint(local)
            if self.ctx.query is not None:  # before the upload takes `local` away
                view = link_view(local, self._local.workdir / f"query-{checkpoint_id}")
        except Exception as exc:  # noqa: BLE001 - local disk trouble: decline, maybe tolerate
            if view is not None:
                shutil.rmtree(view, ignore_errors=True)
            self._snapshot_failed(checkpoint_id, exc, out, sent_before)
            return None
        return local, view

    def upload(
        self,
        checkpoint_id: int,
        taken: tuple[Path, Path | None],
        positions: dict[str, int],
    ) -> Future[SnapshotInfo]:
        """Snapshot n to checkpoint storage, in the background; what it holds besides the
        state: the channel positions, the layout, the time and the loop's position."""
        held: dict[str, Any] = {
            "positions": positions,
            "state": STATE_FORMAT,
            LAYOUT_KEY: self.ctx.channel_layout(),
        }
        if self.ctx.stage.timed:
            held |= self._time.snapshot_meta(self._chain)
        if self._fed is not None:
            held |= self._fed.snapshot_meta()
        return self._local.snapshots.upload(checkpoint_id, taken[0], held)

    def committing(
        self,
        epoch: ClosedEpoch,
        future: Future[SnapshotInfo],
        alignment_s: float,
        taken: tuple[Path, Path | None],
        sent_before: Mark | None,
    ) -> None:
        """Checkpoint n is past its synchronous part: `finish` commits it once ``future``
        says its snapshot is durable."""
        current = self._time.watermarks.current
        timed = self.ctx.stage.timed
        watermark = current if timed and current > NO_WATERMARK else None
        self.pending = _Pending(
            epoch, future, alignment_s, watermark, sent_before=sent_before, view=taken[1]
        )
        keys = self._local.store.approximate_keys()
        metrics.state_keys.labels(**self.labels).set(keys)

    def finish(self, out: TransactionalOutput, block: bool) -> int | None:
        """Commit the checkpoint whose snapshot is durable; acknowledge it once committed.
        Returns its id once committed.

        ``block``: wait for both rather than look whether they are done.
        """
        pending = self.pending
        if pending is None:
            return None
        if pending.info is None:
            if not block and not pending.future.done():
                return None
            try:
                pending.info = pending.future.result()
            except Exception as exc:  # noqa: BLE001 - storage trouble: decline, maybe tolerate
                self.pending = None
                if pending.view is not None:  # its transaction is aborted: never served
                    shutil.rmtree(pending.view, ignore_errors=True)
                self._snapshot_failed(pending.epoch.checkpoint_id, exc, out, pending.sent_before)
                return None
            faults.reach("snapshot_durable", self.ctx.task_id)
            out.commit_async()
        commit_s = out.commit_finished(block)
        if commit_s is None:
            return None
        self.pending = None
        self._committed(pending, pending.info, commit_s)
        return pending.epoch.checkpoint_id

    def _committed(self, pending: _Pending, info: SnapshotInfo, commit_s: float) -> None:
        """Transaction n committed: served, acknowledged, older snapshots let go."""
        checkpoint_id = pending.epoch.checkpoint_id
        faults.reach("committed", self.ctx.task_id)
        if self._postgres is not None:
            self._postgres.commit(checkpoint_id, self.ctx.task_id)
        self._writer.committed()
        self._failures = 0
        metrics.snapshot_failures_in_a_row.labels(**self.labels).set(0)
        if self.ctx.query is not None:
            self.ctx.query.committed(checkpoint_id, pending.view, self._local.store, self._epoch)
        metrics.snapshot_upload_seconds.labels(**self.labels).observe(info.duration_s)
        metrics.transaction_commit_seconds.labels(**self.labels).observe(commit_s)
        metrics.state_size_bytes.labels(**self.labels).set(info.full_bytes)
        if self.ctx.settings.checkpoint_alignment == "unaligned":
            # Snapshotted at the first barrier, the lag then counted the other channels'
            # barriers of the same checkpoint, still unread: an idle job never looked idle.
            pending.epoch.lag = self.lag()
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
        self._local.retainer.submit(self._retain, info.ref)

    def serve_committed(self, checkpoint_id: int) -> None:
        """After a restore (or a fallback's replay), the state in RocksDB is checkpoint
        ``checkpoint_id``'s, committed: requests may read it (0: nothing committed yet, so
        no key has a committed value). Checkpoints taken later are served as they commit."""
        gate = self.ctx.query
        if gate is None:
            return
        view: Path | None = None
        if checkpoint_id:
            view = self._local.workdir / f"query-{checkpoint_id}"
            self._local.store.checkpoint(view)
        gate.committed(checkpoint_id, view, self._local.store, self._epoch)

    def _epoch(self, store_key: bytes) -> tuple[bool, bytes | None]:
        """What this epoch holds in memory for a key (a ``fresh`` request's newest value)."""
        return epoch_value(self._chain, store_key)

    def _retain(self, committed: SnapshotRef) -> None:
        snapshots = self._local.snapshots
        try:
            kept = snapshots.retain(committed, self.ctx.settings.retained_checkpoints).result()
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
        partition = self._shuffle.partition
        if purger is None or not purger.due(partition):
            return
        below = purge_floor(self._shuffle, kept)
        if below is not None:
            purger.purge_below(partition, below)
        fed_purger = self.ctx.feedback_purger
        if self._fed is not None and fed_purger is not None and fed_purger.due(partition):
            # Fed-back records below every retained snapshot's F are never read again.
            positions = [f for m in kept if type(f := m.get(FEEDBACK_KEY)) is int]
            if positions and len(positions) == len(kept):
                fed_purger.purge_below(partition, min(positions))

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
        self._failures += 1
        tolerated = self.ctx.settings.tolerable_checkpoint_failures
        reason = f"snapshot failed: {type(exc).__name__}: {exc}"
        metrics.snapshot_failures.labels(**self.labels).inc()
        metrics.snapshot_failures_in_a_row.labels(**self.labels).set(self._failures)
        log.warning(
            "%s: checkpoint %d declined, %s (%d in a row, %d tolerated)",
            self.ctx.task_id,
            checkpoint_id,
            reason,
            self._failures,
            tolerated,
        )
        self.ctx.report(Decline(self.ctx.task_id, checkpoint_id, reason))
        if self._failures > tolerated:
            raise RuntimeError(
                f"{self._failures} checkpoints in a row failed "
                f"(PROCESSOR_TOLERABLE_CHECKPOINT_FAILURES={tolerated}): {reason}"
            ) from exc
        out.abort()
        if self._postgres is not None:  # its rows go again, in the next epoch's transaction
            self._postgres.decline(checkpoint_id, self._chain)
        self._writer.aborted(out.transactional)
        if out.transactional:
            # Its watermark record is aborted too: downstream still has the one before.
            self._time.sent = sent_before

    def lag(self) -> int:
        """Records of the task's input not read yet (and, for a loop, fed back and not
        processed yet)."""
        tp = TopicPartition(self._shuffle.topic, self._shuffle.partition)
        lag = clients.behind(self._consumer, tp, self._start)
        partition = str(tp.partition)
        metrics.consumer_lag.labels(**self.labels, partition=partition).set(lag)
        if self._fed is not None:  # a job whose loop still feeds records back is not idle
            lag += self._fed.lag()
        return lag
