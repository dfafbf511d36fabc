"""When something that failed may start again: one policy for the restarts of a crashed service
(`processor local`) and of a failed task (the worker), so a persistent failure is a slow retry,
never a crash loop."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RestartBackoff:
    """When a crashed child may start again: doubling delays, forgiven after a healthy run.

    Pure (the caller passes the clock), so the policy is unit-tested without processes.
    """

    initial_s: float = 0.5
    max_s: float = 10.0
    healthy_after_s: float = 30.0  # a run this long resets the delay to ``initial_s``
    _delay_s: float = field(default=0.0, init=False)

    def next_start(self, started_at: float, exited_at: float) -> float:
        """The time the child may start again after a run from ``started_at`` to ``exited_at``."""
        if exited_at - started_at >= self.healthy_after_s:
            self._delay_s = 0.0
        self._delay_s = min(self.max_s, self._delay_s * 2 if self._delay_s else self.initial_s)
        return exited_at + self._delay_s
