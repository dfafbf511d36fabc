"""What the coordinator remembers of past checkpoints for the status page: the completed ones
(read back from the checkpoints topic at start, then as they complete), the recent failures,
the counts, and the last hour's charts. Pure: the service records into it."""

from __future__ import annotations

import collections
from typing import Any

from processor.checkpointing.coordinator import FailedCheckpoint
from processor.coordinator.status.history import StatusHistory

CHECKPOINT_HISTORY = 100  # completed checkpoints kept in the compacted topic
FAILURES_KEPT = 50


class CheckpointJournal:
    """``history``: recent completed checkpoints' records, newest last; ``failures``: the
    recent failed ones; ``counts``: completed and failed since the coordinator started."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=FAILURES_KEPT)
        self.counts = collections.Counter[str]()
        self.hour = StatusHistory()  # the status page's charts

    def load(self, history: list[dict[str, Any]]) -> int:
        """The completed checkpoints earlier coordinators recorded; returns the newest id."""
        self.history = history
        self.hour = StatusHistory()
        self.hour.rebuild(history)
        return int(history[-1]["id"]) if history else 0

    @property
    def last(self) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    def completed(self, record: dict[str, Any], lag: dict[str, int]) -> None:
        """A checkpoint completed (``record``, as the checkpoints topic has it), with the
        tasks' ``lag`` then."""
        self.history = [*self.history[-(CHECKPOINT_HISTORY - 1) :], record]
        self.hour.completed(record, lag)
        self.counts["completed"] += 1

    def failed(self, failed: FailedCheckpoint, at: float) -> None:
        """A checkpoint failed at ``at`` (epoch seconds)."""
        self.counts["failed"] += 1
        self.failures.append(
            {"id": failed.checkpoint_id, "status": "failed", "at": at, "reason": failed.reason}
        )
        self.hour.failed(failed.checkpoint_id, at)
