"""Where a keyed task's state comes from when it starts: its committed snapshot, an older one
that stands in for it (a fallback, replayed up to the committed checkpoint), or a savepoint
(a job's first start); and which of its shuffle's records no restore will read again."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor import metrics
from processor.checkpointing.aligner import Channel
from processor.config import Settings
from processor.plan.stages import Stage
from processor.state.format import STATE_FORMAT
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotInfo, SnapshotRef
from processor.state.savepoints import inherited_floors, open_savepoint
from processor.state.storage import SnapshotMissing
from processor.worker.layout import check_snapshot as check_layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShuffleInput:
    """The shuffle partition a keyed task reads: what its snapshots' positions are about."""

    task_id: str
    topic: str
    partition: int
    channels: int  # upstream tasks writing into it

    def positions(self, meta: dict[str, Any]) -> dict[Channel, int]:
        """The channel positions a snapshot's metadata holds the records up to.

        Raises `SnapshotMissing` for a snapshot of another state format, or without them.
        """
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

    def resume_offset(self, meta: dict[str, Any]) -> int:
        """Where a restore of that snapshot reads the shuffle from (0: a channel it has no
        position for starts at the beginning)."""
        positions = self.positions(meta)
        if len(positions) < self.channels:
            return 0
        return min(positions.values(), default=-1) + 1


@dataclass(frozen=True)
class Restored:
    """A restored snapshot; ``replay_from`` > 0 after a fallback: the checkpoint restored,
    older than the committed one, from which the task replays without output."""

    info: SnapshotInfo
    positions: dict[Channel, int]
    replay_from: int = 0


def restore_snapshot(
    snapshots: SnapshotProcess,
    shuffle: ShuffleInput,
    committed: SnapshotRef,
    db_path: Path,
    log_start: int,
    no_fallback: str | None,
) -> Restored:
    """Restore the committed snapshot, or an older one that can stand in for it.

    Any complete snapshot m older than the committed checkpoint n can: both hold exactly
    the records up to their barrier (m, n) on every channel, and barrier m precedes
    barrier n on each. So m plus the records from barrier m to barrier n is the committed
    state. Those records are replayed into the state *without output*, since their output
    is committed already; each channel's replay ends at its barrier n, which is a fact of
    the log rather than of how the reads were batched. A snapshot whose records were
    purged from the shuffle (below ``log_start``) cannot be replayed and does not count.
    Without such a snapshot the task fails with the reason, and never guesses.
    ``no_fallback``: why none may stand in (None: one may).
    """
    try:
        info = snapshots.restore(committed, db_path)
        return Restored(info, _positions(shuffle, info))
    except SnapshotMissing as exc:
        problem = str(exc)
    log.error("%s: %s", shuffle.task_id, problem)
    if no_fallback is not None:
        raise SnapshotMissing(f"{problem}; {no_fallback}")
    for older in reversed(snapshots.snapshots()):
        if older.checkpoint_id >= committed.checkpoint_id:
            continue
        try:
            # Nothing reused: an older generation's retention need not keep these files.
            info = snapshots.restore(older, db_path, reuse=False)
            held = _positions(shuffle, info)
            resume = min(held.values(), default=-1) + 1
            if len(held) < shuffle.channels or resume < log_start:
                raise SnapshotMissing(
                    f"checkpoint {older} resumes below {shuffle.topic}[{shuffle.partition}]'s "
                    f"log start {log_start}: its records were purged"
                )
        except SnapshotMissing as exc:
            log.error("%s: %s", shuffle.task_id, exc)
            shutil.rmtree(db_path, ignore_errors=True)
            continue
        log.warning(
            "%s: falling back to checkpoint %s; replaying up to barrier %d of every "
            "channel without output (it is committed already)",
            shuffle.task_id,
            older,
            committed.checkpoint_id,
        )
        return Restored(info, held, replay_from=older.checkpoint_id)
    raise SnapshotMissing(f"{problem}; no older snapshot can stand in for it")


def load_savepoint(
    settings: Settings, stage: Stage, shuffle: ShuffleInput, db_path: Path
) -> dict[str, Any]:
    """A job's first start from a savepoint: this partition's keys of the stage's
    operators, from every saved task (the partition count may have changed); the
    shuffle, new with the job, is read from its start. Returns the time metadata to
    start from: the saved tasks' watermarks as lateness floors."""
    started = time.monotonic()
    store, savepoint = open_savepoint(settings)
    operators = [n.name for n in stage.stateful]
    metas: dict[str, dict[str, Any]] = {}
    keys = store.load_partition(
        savepoint, operators, shuffle.partition, settings.shuffle_partitions, db_path, metas
    )
    log.info(
        "%s: loaded %d keys from savepoint %s (checkpoint %d of job %s) in %.3fs",
        shuffle.task_id,
        keys,
        settings.from_savepoint,
        savepoint.checkpoint_id,
        savepoint.job,
        time.monotonic() - started,
    )
    return {"floors": inherited_floors(savepoint, metas, operators)}


def purge_floor(shuffle: ShuffleInput, kept: list[dict[str, Any]]) -> int | None:
    """The offset below which no retained snapshot's restore reads the shuffle again (None:
    none can be told, so nothing is purged).

    The retained snapshots are the committed one and its fallbacks; a restore only ever
    resumes at one of them (a fallback skips any other snapshot it finds below the log
    start, see `restore_snapshot`).
    """
    below: int | None = None
    for meta in kept:
        try:
            resume = shuffle.resume_offset(meta)
        except SnapshotMissing:
            return None
        below = resume if below is None else min(below, resume)
    return below


def _positions(shuffle: ShuffleInput, info: SnapshotInfo) -> dict[Channel, int]:
    try:
        return shuffle.positions(info.meta)
    except SnapshotMissing as exc:
        raise SnapshotMissing(f"checkpoint {info.ref}: {exc}") from None


def committed_snapshot(
    meta: dict[str, Any], checkpoint_id: int, shuffle: ShuffleInput
) -> SnapshotRef | None:
    """The snapshot the commit of ``checkpoint_id`` names (None: nothing committed yet)."""
    if not checkpoint_id:
        return None
    owner = meta.get("snapshot")
    if not isinstance(owner, str):
        raise SnapshotMissing(
            f"the commit of checkpoint {checkpoint_id} on {shuffle.topic}"
            f"[{shuffle.partition}] names no snapshot (written by an older version?)"
        )
    return SnapshotRef(checkpoint_id, owner)


def restore_committed(
    settings: Settings,
    snapshots: SnapshotProcess,
    shuffle: ShuffleInput,
    committed: SnapshotRef,
    db_path: Path,
    log_start: int,
    layout: list[list[Any]],
    no_fallback: str | None = None,
) -> Restored:
    """`restore_snapshot`, its layout checked against the task's, timed and counted."""
    started = time.monotonic()
    if no_fallback is None and settings.checkpoint_alignment == "unaligned":
        # The replay would have to end at the committed snapshot's own positions: the
        # ones that are lost with it (see checkpointing/unaligned.py).
        no_fallback = "unaligned checkpoints do not fall back"
    restored = restore_snapshot(snapshots, shuffle, committed, db_path, log_start, no_fallback)
    info = restored.info
    check_layout(info.meta, layout, info.ref.checkpoint_id)
    took = time.monotonic() - started
    labels = {"job_name": settings.job_name, "task": shuffle.task_id}
    metrics.restores_total.labels(**labels).inc()
    metrics.last_restore_seconds.labels(**labels).set(took)
    metrics.state_size_bytes.labels(**labels).set(info.full_bytes)
    log.info(
        "%s: restored checkpoint %s (%d bytes) in %.3fs",
        shuffle.task_id,
        info.ref,
        info.full_bytes,
        took,
    )
    return restored
