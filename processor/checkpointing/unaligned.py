"""Unaligned checkpoints: snapshot at the *first* barrier n, hold nothing back, still exact.

Flink's unaligned checkpoints snapshot at the first barrier and store the in-flight records
(those before barrier n on the other channels) with the snapshot. Here the channels are Kafka
partitions, so the in-flight records need no copy: they are in the log. The snapshot's
positions say, per channel, up to where the state holds the records; the rest is read again.

**Why it stays exactly-once** (``P[c]``: the last offset of channel ``c`` the task processed,
or whose barrier it consumed, when it snapshots; the state ``S`` holds exactly the records
of every ``c`` at offsets ``<= P[c]``, because a partition is read in order and no channel is
ever held back):

1. After a restore of ``(S, P)`` the task resumes each partition at ``min P + 1`` and skips
   records at ``<= P[c]``: every record is in the state exactly once (`admit`).
2. The records after ``P[c]`` are still in the log: the shuffle is purged only below the
   positions of the snapshots a restore can use (`KeyedTask._purge`).
3. The task only ever reads committed records (read_committed), so whatever upstream does when
   it recovers (abort its open transaction, replay from its own last commit) never changes a
   record in ``S`` or one it will read after ``P[c]``.
4. The task's transaction n holds its output derived from ``S``, the positions ``P`` (in the
   snapshot its commit names) and barrier n for the stages downstream. What it emits later,
   from the records before barrier n on slower channels, reaches downstream after barrier n,
   in its epoch n+1; if the task fails before committing n+1, that output is aborted and, after
   the restore of ``(S, P)``, produced again from the same records.

Recovery is per task here (each task restores its own last commit), so 1-4 are all that
exactly-once needs. **What it does not keep:** a snapshot is no longer "every record before
barrier n": its cut includes records still in the shuffle logs. So

- a *savepoint* (restored into a new job with new, empty shuffle topics) would miss them:
  savepoints need aligned checkpoints, and `processor savepoint` refuses an unaligned job;
- the *fallback* to an older snapshot m replays quietly up to the committed checkpoint's
  barrier; unaligned, it would have to stop at the committed snapshot's positions instead,
  which are in that snapshot's manifest, the one that is missing or corrupt. So an unaligned
  task does not fall back: it fails with one line naming the snapshot.
"""

from __future__ import annotations

from processor.checkpointing.aligner import (
    NOOP,
    BarrierHandler,
    BarrierOutcome,
    Channel,
    Verdict,
    resume_offsets,
)

_PROCESS = Verdict.PROCESS
_SKIP = Verdict.SKIP


class UnalignedTracker(BarrierHandler):
    """Never an alignment in progress (``pending`` is None). ``_pos``: the restored positions,
    records up to which are never processed again; ``_cur``: the state's positions now."""

    def _setup(self) -> None:
        self._cur = dict(self._pos)

    @property
    def positions(self) -> dict[Channel, int]:
        return dict(self._cur)

    def resume_offsets(self) -> dict[int, int]:
        """Where a restore of the state as it is now would resume: the committed offset of a
        snapshot taken now (``_pos`` only says what is never processed again)."""
        return resume_offsets(self._cur)

    def admit(self, channel: Channel, offset: int) -> Verdict:
        if offset <= self._pos[channel]:
            return _SKIP
        self._cur[channel] = offset
        return _PROCESS

    def on_barrier(self, channel: Channel, checkpoint_id: int, offset: int) -> BarrierOutcome:
        if channel not in self._cur:
            raise ValueError(f"barrier from unknown channel {channel}")
        if offset <= self._pos[channel]:
            return NOOP  # replayed after a restore: consumed before
        self._cur[channel] = max(self._cur[channel], offset)
        if checkpoint_id <= self.last_completed:
            return NOOP  # this checkpoint was taken at an earlier channel's barrier
        self.last_completed = checkpoint_id
        return BarrierOutcome(completed=checkpoint_id, positions=dict(self._cur))
