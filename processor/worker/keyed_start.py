"""A keyed task's start: with every predecessor fenced, the committed checkpoint read from
Kafka, its snapshot (or one standing in for it, or a savepoint, or nothing) restored into
RocksDB, the stage's chain opened over it, and the input read from where that state ends."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from processor.checkpointing.aligner import BarrierAligner, BarrierHandler, Channel
from processor.checkpointing.tracker import BarrierTracker
from processor.checkpointing.unaligned import UnalignedTracker
from processor.config import Settings
from processor.engine.chain import StageChain
from processor.kafka import clients
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.worker.gaps import STATE_LOST, check_resume
from processor.worker.keyed_feedback import FeedbackInput, history_of, position_of
from processor.worker.keyed_restore import (
    ShuffleInput,
    committed_snapshot,
    load_savepoint,
    restore_committed,
)
from processor.worker.keyed_time import TaskTime
from processor.worker.postgres_orphans import after_savepoint
from processor.worker.task import TaskContext, commit_metadata, committed_after_fencing

if TYPE_CHECKING:
    from processor.sinks.postgres.writer import PostgresSinks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Started:
    """A restored keyed task. ``replay_from`` > 0 after a fallback: the checkpoint restored,
    from which the task replays without output up to ``replay_to``, the committed one."""

    last_checkpoint: int
    store: RocksDBStore
    chain: StageChain
    aligner: BarrierHandler
    replay_from: int = 0
    replay_to: int = 0


class KeyedStart:
    """What a keyed task starts from; ``time`` and ``fed`` (a loop's back-edge) are restored
    in place."""

    def __init__(
        self,
        ctx: TaskContext,
        shuffle: ShuffleInput,
        time: TaskTime,
        fed: FeedbackInput | None,
        postgres: PostgresSinks | None,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.stage = ctx.stage
        self._shuffle = shuffle
        self._time = time
        self._fed = fed
        self._postgres = postgres

    def restore(self, consumer: Consumer, snapshots: SnapshotProcess, db_path: Path) -> Started:
        """The committed state into RocksDB at ``db_path``, the chain over it, and
        ``consumer`` assigned where that state ends."""
        shuffle = self._shuffle
        tp = TopicPartition(shuffle.topic, shuffle.partition)
        meta = commit_metadata(committed_after_fencing(self.settings, [tp])[0])
        last = int(meta.get("checkpoint", 0))
        self._recover_postgres(last)
        committed = committed_snapshot(meta, last, shuffle)
        # Only now, with every predecessor fenced, may the generation be chosen.
        snapshots.open(committed)
        positions, held, replay_from = self._restore_state(consumer, snapshots, committed, db_path)
        if self._fed is not None:
            self._start_feedback(consumer, meta, last, held if committed is not None else None)
        store = RocksDBStore(db_path)
        chain = open_chain(self.ctx, self._shuffle.partition, store, held, self._time)
        channels = [(shuffle.partition, u) for u in range(shuffle.channels)]
        # A replay aligns the barriers after the fallback snapshot again, as the first run did.
        aligner = barrier_handler(self.settings)(channels, positions, replay_from or last)
        start = aligner.resume_offsets()[shuffle.partition]
        check_resume(consumer, shuffle.topic, shuffle.partition, start, last, STATE_LOST)
        consumer.assign([TopicPartition(shuffle.topic, shuffle.partition, start)])
        log.info("%s: resuming %s[%d] at %d", shuffle.task_id, tp.topic, tp.partition, start)
        replay_to = last if replay_from else 0
        return Started(last, store, chain, aligner, replay_from, replay_to)

    def _recover_postgres(self, last_checkpoint: int) -> None:
        """The task's prepared PostgreSQL transactions settled as Kafka decided (and, for
        a first start, those of the job it started from)."""
        if self._postgres is None:
            return
        self._postgres.recover(last_checkpoint)
        if not last_checkpoint:
            after_savepoint(self.settings, self.ctx.graph, self.ctx.task_id, self._postgres)

    def _restore_state(
        self,
        consumer: Consumer,
        snapshots: SnapshotProcess,
        committed: SnapshotRef | None,
        db_path: Path,
    ) -> tuple[dict[Channel, int], dict[str, Any], int]:
        """The committed snapshot (or one standing in for it), else a savepoint, into
        ``db_path``: the channel positions it holds, its metadata, and the checkpoint a
        fallback replays from (0: none)."""
        if committed is not None:
            tp = TopicPartition(self._shuffle.topic, self._shuffle.partition)
            low, _ = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
            restored = restore_committed(
                self.settings,
                snapshots,
                self._shuffle,
                committed,
                db_path,
                low,
                self.ctx.channel_layout(),
            )
            return restored.positions, restored.info.meta, restored.replay_from
        if self.settings.from_savepoint:
            if self._fed is not None:
                raise RuntimeError(
                    "a job with a loop cannot start from a savepoint: the records in flight "
                    "round its loop are not in it (docs/loops.md)"
                )
            return {}, load_savepoint(self.settings, self.stage, self._shuffle, db_path), 0
        return {}, {}, 0

    def _start_feedback(
        self, consumer: Consumer, meta: dict[str, Any], last: int, held: dict[str, Any] | None
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
            fed.start(position_of(held, last), history_of(meta))
        log.info(
            "%s: loop feedback from %s[%d] at %d",
            self.ctx.task_id,
            fed.tp.topic,
            fed.tp.partition,
            fed.position,
        )


def open_chain(
    ctx: TaskContext, channel: int, store: RocksDBStore, held: dict[str, Any], time: TaskTime
) -> StageChain:
    """The stage's chain over a restored store, its time (restored in ``time``) and its
    timers restored from ``held``, the snapshot's metadata."""
    s, stage = ctx.settings, ctx.stage
    chain = StageChain(
        ctx.graph.plan,
        stage,
        channel,
        store,
        # A loop's feedback topic has as many partitions as the stage's shuffle.
        {n.name: s.shuffle_partitions for n in stage.outputs},
        s.max_key_bytes,
        ctx.graph.late_topic,
        s.combine,
        clients.record_limit(s),
    )
    if stage.timed:
        time.restore(chain, held)
    # Windows', joins', process timers, TTL deadlines (`processor.engine.expiry`).
    for prefix in chain.timed_operators():
        chain.restore_timers(prefix, store.items(prefix))
    return chain


def barrier_handler(settings: Settings) -> type[BarrierHandler]:
    if settings.guarantee == "at_least_once":
        return BarrierTracker  # never hold a channel back; records may count twice
    if settings.checkpoint_alignment == "unaligned":
        return UnalignedTracker
    return BarrierAligner
