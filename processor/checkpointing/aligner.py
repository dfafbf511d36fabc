"""Barrier alignment for a task with several input channels: a state machine with no I/O.

A *channel* is one upstream task writing into one input partition, ``(partition, upstream)``.
Several channels share a partition, so "holding a channel back" cannot pause the partition.
Instead of buffering held-back records (unbounded memory), the aligner only remembers the
offset of the first one per partition; once alignment ends, the task seeks back there and
reads again. What was already processed is recognised by per-channel positions: every record
of channel ``c`` at an offset ``<= position[c]`` is already in the state and is skipped.

The same positions make recovery exact: a snapshot stores them, the task resumes each
partition at ``min(position) + 1`` and skips exactly what the snapshot holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

Channel = tuple[int, int]  # (input partition, upstream task index)


class Verdict(Enum):
    PROCESS = 1  # new data: apply it
    SKIP = 2  # already part of the state (replayed after a seek or a restore)
    HOLD = 3  # after this channel's barrier, before alignment ends: will be read again


@dataclass(frozen=True)
class BarrierOutcome:
    """What one barrier record means for the task."""

    completed: int | None = None  # checkpoint id whose alignment just completed: snapshot now
    aborted: int | None = None  # checkpoint id given up because a newer barrier overtook it
    seeks: Mapping[int, int] = field(default_factory=dict)  # partition -> offset to re-read from
    positions: Mapping[Channel, int] = field(default_factory=dict)  # with completed: snapshot's

    @property
    def is_noop(self) -> bool:
        return self.completed is None and self.aborted is None and not self.seeks


NOOP = BarrierOutcome()


class BarrierHandler:
    """What a keyed task asks of its barrier handling: aligned (`BarrierAligner`), at least
    once (`tracker.BarrierTracker`) or unaligned (`unaligned.UnalignedTracker`)."""

    def __init__(
        self,
        channels: Iterable[Channel],
        positions: Mapping[Channel, int] | None = None,
        last_completed: int = 0,
    ) -> None:
        self._channels = frozenset(channels)
        # Per channel: the restored state holds its records up to here (-1: none).
        self._pos = restored_positions(self._channels, positions)
        self.last_completed = last_completed
        self._setup()

    def _setup(self) -> None:
        """A subclass's own fields, once the restored positions are in."""

    @property
    def pending(self) -> int | None:
        """The checkpoint whose barriers are being gathered, if any."""
        return None

    @property
    def positions(self) -> dict[Channel, int]:
        return dict(self._pos)

    def resume_offsets(self) -> dict[int, int]:
        """Per partition, where reading must start so that nothing after the positions is lost."""
        return resume_offsets(self._pos)

    def admit(self, channel: Channel, offset: int) -> Verdict:
        raise NotImplementedError

    def on_barrier(self, channel: Channel, checkpoint_id: int, offset: int) -> BarrierOutcome:
        raise NotImplementedError


class BarrierAligner(BarrierHandler):
    """Aligns barriers across ``channels``: a held channel is never processed early."""

    def _setup(self) -> None:
        self._pending: int | None = None
        self._barrier_at: dict[Channel, int] = {}  # channels aligned for `pending`
        self._first_held: dict[int, int] = {}  # partition -> first held-back offset
        self._last_seen: dict[int, int] = {}  # partition -> last offset seen while aligning

    @property
    def pending(self) -> int | None:
        return self._pending

    def admit(self, channel: Channel, offset: int) -> Verdict:
        """Verdict for a data record (the per-record hot path: keep it cheap)."""
        if offset <= self._pos[channel]:
            return Verdict.SKIP
        if self.pending is None:
            return Verdict.PROCESS
        partition = channel[0]
        self._last_seen[partition] = offset
        if channel in self._barrier_at:
            if partition not in self._first_held:
                self._first_held[partition] = offset
            return Verdict.HOLD
        return Verdict.PROCESS

    def on_barrier(self, channel: Channel, checkpoint_id: int, offset: int) -> BarrierOutcome:
        if channel not in self._pos:
            raise ValueError(f"barrier from unknown channel {channel}")
        if offset <= self._pos[channel]:
            return NOOP  # replayed: this barrier was consumed before the seek or restore
        partition = channel[0]
        if self.pending is not None:
            self._last_seen[partition] = offset
            if channel in self._barrier_at:
                if partition not in self._first_held:
                    self._first_held[partition] = offset
                return NOOP  # a later barrier of a held channel is read again after alignment
        if checkpoint_id <= self.last_completed or (
            self.pending is not None and checkpoint_id < self.pending
        ):
            return NOOP  # its checkpoint completed or was given up already: a late straggler

        aborted: int | None = None
        seeks: dict[int, int] = {}
        if self.pending is not None and checkpoint_id > self.pending:
            # The upstream of `channel` skipped `pending` (it recovered, or the trigger was lost):
            # `pending` can never complete. Release the held channels and read them again.
            aborted = self.pending
            seeks = self._release(offset_of_current=(partition, offset))
        if self.pending is None:
            self._pending = checkpoint_id
            self._last_seen = {partition: offset}
        self._barrier_at[channel] = offset
        if len(self._barrier_at) < len(self._channels):
            return BarrierOutcome(aborted=aborted, seeks=seeks)

        completed = checkpoint_id
        for held_channel, barrier_offset in self._barrier_at.items():
            self._pos[held_channel] = barrier_offset
        for part, first in self._first_held.items():
            seeks[part] = min(seeks.get(part, first), first)
        self._reset(completed)
        return BarrierOutcome(
            completed=completed, aborted=aborted, seeks=seeks, positions=dict(self._pos)
        )

    def _release(self, offset_of_current: tuple[int, int]) -> dict[int, int]:
        """Give up the pending alignment; return where to re-read held-back records."""
        cur_partition, cur_offset = offset_of_current
        last_seen = dict(self._last_seen)
        last_seen[cur_partition] = max(last_seen.get(cur_partition, cur_offset), cur_offset)
        for channel in self._channels:
            if channel in self._barrier_at:
                # Its records up to its barrier are in the state; the barrier itself is consumed.
                self._pos[channel] = self._barrier_at[channel]
            elif channel[0] in self._first_held:
                # Everything this channel sent up to the last offset seen was processed.
                self._pos[channel] = max(self._pos[channel], last_seen[channel[0]])
        seeks = dict(self._first_held)
        self._reset(self.last_completed)
        return seeks

    def _reset(self, last_completed: int) -> None:
        self.last_completed = last_completed
        self._pending = None
        self._barrier_at = {}
        self._first_held = {}
        self._last_seen = {}


def restored_positions(
    channels: frozenset[Channel], positions: Mapping[Channel, int] | None
) -> dict[Channel, int]:
    """Per channel, the offset up to which a restored state holds its records (-1: none)."""
    if not channels:
        raise ValueError("a task needs at least one input channel")
    restored = dict.fromkeys(channels, -1)
    for channel, offset in (positions or {}).items():
        if channel in restored:
            restored[channel] = offset
    return restored


def resume_offsets(positions: Mapping[Channel, int]) -> dict[int, int]:
    """Per partition, the first offset after which some channel's records are not held."""
    resume: dict[int, int] = {}
    for (partition, _), offset in positions.items():
        resume[partition] = min(resume.get(partition, offset + 1), offset + 1)
    return resume
