"""Checkpoint bookkeeping: trigger, collect acknowledgements, complete. No I/O.

Each task commits its own transaction when its own snapshot is durable, so a task's restore
point never waits for the others. A *completed* checkpoint is the global view: every task
acknowledged the same id, so together the snapshots form one consistent cut of the job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from processor.models.control import Ack
from processor.models.limits import MAX_ID_JUMP


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    triggered_at: float
    acks: dict[str, Ack] = field(default_factory=dict)


@dataclass(frozen=True)
class CompletedCheckpoint:
    checkpoint_id: int
    triggered_at: float
    completed_at: float
    acks: dict[str, Ack]

    @property
    def duration_s(self) -> float:
        return self.completed_at - self.triggered_at

    @property
    def uploaded_bytes(self) -> int:
        return sum(a.uploaded_bytes for a in self.acks.values())

    @property
    def state_bytes(self) -> int:
        return sum(a.state_bytes for a in self.acks.values())

    @property
    def records_in(self) -> int:
        return sum(a.records_in for a in self.acks.values())

    @property
    def lag(self) -> int:
        return sum(a.lag for a in self.acks.values())

    def slowest_task(self) -> str:
        return max(self.acks.values(), key=lambda a: a.alignment_s + a.sync_s + a.upload_s).task

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.checkpoint_id,
            "triggered_at": self.triggered_at,
            "completed_at": self.completed_at,
            "duration_s": round(self.duration_s, 4),
            "uploaded_bytes": self.uploaded_bytes,
            "state_bytes": self.state_bytes,
            "records_in": self.records_in,
            "tasks": {
                t: {
                    "worker": a.worker,
                    "positions": a.positions,
                    "snapshot": f"chk-{a.checkpoint:012d}" if a.state_bytes else None,
                    "owner": a.snapshot or None,
                    "state_bytes": a.state_bytes,
                    "uploaded_bytes": a.uploaded_bytes,
                    "alignment_s": a.alignment_s,
                    "sync_s": a.sync_s,
                    "upload_s": a.upload_s,
                    "commit_s": a.commit_s,
                    "records_in": a.records_in,
                    "busy_cpu_s": a.busy_cpu_s,
                }
                for t, a in sorted(self.acks.items())
            },
        }


@dataclass(frozen=True)
class FailedCheckpoint:
    checkpoint_id: int
    reason: str


class CheckpointCoordinator:
    def __init__(
        self,
        tasks: Iterable[str],
        last_id: int = 0,
        timeout_s: float = 60.0,
        max_pending: int = 100,
        max_concurrent: int = 1,
    ) -> None:
        self.tasks = frozenset(tasks)
        self.last_id = last_id
        # Ids are taken from this coordinator's own history: the last completed checkpoint
        # it read, plus one per checkpoint it triggers. A task may name an id above that
        # (it committed its part of checkpoints that failed), but not by more than
        # MAX_ID_JUMP: such an id is not from this job and is never handed out (issue 41).
        self.ceiling = last_id + MAX_ID_JUMP
        self.last_completed: CompletedCheckpoint | None = None
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        # Like Flink's maxConcurrentCheckpoints: a checkpoint slower than the interval delays
        # the next trigger instead of piling barriers up behind it, which a busy task would
        # then work off one snapshot at a time and never catch up.
        self.max_concurrent = max_concurrent
        self.pending: dict[int, PendingCheckpoint] = {}

    def plausible(self, checkpoint_id: int) -> bool:
        """Whether a task may name ``checkpoint_id``: at most ``ceiling``."""
        return checkpoint_id <= self.ceiling

    def observe(self, checkpoint_id: int) -> bool:
        """An id seen elsewhere (a task, an earlier coordinator): never hand it out again.
        False (and nothing learnt) for an id that is not `plausible`."""
        if not self.plausible(checkpoint_id):
            return False
        self.last_id = max(self.last_id, checkpoint_id)
        return True

    @property
    def newest_pending(self) -> PendingCheckpoint | None:
        return self.pending[max(self.pending)] if self.pending else None

    @property
    def can_trigger(self) -> bool:
        return len(self.pending) < self.max_concurrent

    def fail_waiting_on(self, not_running: Iterable[str]) -> list[FailedCheckpoint]:
        """Fail the pending checkpoints that wait for a task that is not running.

        A task that restarts never acknowledges a checkpoint triggered before it ran (a
        source acts only on triggers it receives), so waiting for its timeout would only
        hold the next trigger back.
        """
        stopped = frozenset(not_running) & self.tasks
        failed = []
        for checkpoint_id in sorted(self.pending):
            missing = sorted(stopped - self.pending[checkpoint_id].acks.keys())
            if missing:
                del self.pending[checkpoint_id]
                failed.append(FailedCheckpoint(checkpoint_id, f"{', '.join(missing)} not running"))
        return failed

    def trigger(self, now: float) -> tuple[int, list[FailedCheckpoint]]:
        self.last_id += 1
        self.ceiling += 1
        self.pending[self.last_id] = PendingCheckpoint(self.last_id, now)
        failed: list[FailedCheckpoint] = []
        while len(self.pending) > self.max_pending:
            oldest = min(self.pending)
            del self.pending[oldest]
            failed.append(FailedCheckpoint(oldest, "too many checkpoints in progress"))
        return self.last_id, failed

    def on_ack(self, ack: Ack, now: float) -> CompletedCheckpoint | None:
        if not self.observe(ack.checkpoint):
            return None
        pending = self.pending.get(ack.checkpoint)
        if pending is None or ack.task not in self.tasks:
            return None
        pending.acks[ack.task] = ack
        if len(pending.acks) < len(self.tasks):
            return None
        del self.pending[ack.checkpoint]
        # Older checkpoints still waiting are subsumed: this one is newer and complete.
        for older in [c for c in self.pending if c < ack.checkpoint]:
            del self.pending[older]
        done = CompletedCheckpoint(ack.checkpoint, pending.triggered_at, now, dict(pending.acks))
        self.last_completed = done
        return done

    def on_decline(self, checkpoint_id: int, task: str, reason: str) -> FailedCheckpoint | None:
        if not self.observe(checkpoint_id):
            return None
        if self.pending.pop(checkpoint_id, None) is None:
            return None
        return FailedCheckpoint(checkpoint_id, f"declined by {task}: {reason}")

    def expire(self, now: float) -> list[FailedCheckpoint]:
        expired = [p for p in self.pending.values() if now - p.triggered_at > self.timeout_s]
        failed = []
        for p in expired:
            del self.pending[p.checkpoint_id]
            missing = sorted(self.tasks - p.acks.keys())
            failed.append(
                FailedCheckpoint(p.checkpoint_id, f"timed out waiting for {', '.join(missing)}")
            )
        return failed
