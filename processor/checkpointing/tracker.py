"""Barrier tracking for at-least-once: the aligner's interface, without holding anything back.

Every record is processed as soon as it is read, also after its channel's barrier n, so a
snapshot at checkpoint n (taken once barrier n has come from every channel) holds every
record before barrier n *and* some after it. The snapshot's positions are the barriers'
offsets, so after a restore the records after them are read and processed again: nothing is
lost, some records count twice. That is the whole difference to `BarrierAligner`, and the
price of not waiting for the slowest channel (Flink's BarrierTracker).

Several checkpoints may be in flight: a fast channel can deliver barrier n+1 before a slow one
delivers barrier n. A channel whose barrier n+1 arrives without its barrier n (its upstream
recovered and skipped n) will never deliver n: n is given up.
"""

from __future__ import annotations

from processor.checkpointing.aligner import NOOP, BarrierHandler, BarrierOutcome, Channel, Verdict

_PROCESS = Verdict.PROCESS
_SKIP = Verdict.SKIP


class BarrierTracker(BarrierHandler):
    def _setup(self) -> None:
        # Replayed records at or below these offsets are not processed again: they are in
        # the restored state. Unlike the aligner's, positions move only at completions.
        self._skip_to = dict(self._pos)
        self._seen: dict[int, dict[Channel, int]] = {}  # checkpoint -> channel -> barrier offset

    @property
    def pending(self) -> int | None:
        """The oldest checkpoint in flight, if any."""
        return min(self._seen, default=None)

    def admit(self, channel: Channel, offset: int) -> Verdict:
        return _SKIP if offset <= self._skip_to[channel] else _PROCESS

    def on_barrier(self, channel: Channel, checkpoint_id: int, offset: int) -> BarrierOutcome:
        if channel not in self._pos:
            raise ValueError(f"barrier from unknown channel {channel}")
        if offset <= self._skip_to[channel] or checkpoint_id <= self.last_completed:
            return NOOP  # replayed, or its checkpoint completed or was given up already
        self._seen.setdefault(checkpoint_id, {})[channel] = offset
        # Checkpoints older than this one that this channel never delivered cannot complete.
        aborted = [c for c, seen in self._seen.items() if c < checkpoint_id and channel not in seen]
        for c in aborted:
            del self._seen[c]
        seen = self._seen[checkpoint_id]
        if len(seen) < len(self._channels):
            return BarrierOutcome(aborted=max(aborted)) if aborted else NOOP
        for c in [c for c in self._seen if c <= checkpoint_id]:
            del self._seen[c]
        self._pos.update(seen)
        self.last_completed = checkpoint_id
        return BarrierOutcome(
            completed=checkpoint_id,
            aborted=max(aborted) if aborted else None,
            positions=dict(self._pos),
        )
