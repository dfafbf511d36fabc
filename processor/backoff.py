"""When something that failed may start again: one policy for the restarts of a crashed service
(`processor local`) and of a failed task (the worker), so a persistent failure is a slow retry,
never a crash loop; and how long a wait for Kafka sleeps between its tries."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field


def doubling(initial_s: float = 0.5, max_s: float = 10.0) -> Iterator[float]:
    """The delays between tries of something waiting for Kafka: ``initial_s``, doubled each
    time up to ``max_s``, then ``max_s`` for good.

    Example: ``list(itertools.islice(doubling(), 7)) == [0.5, 1, 2, 4, 8, 10, 10]``
    """
    delay = min(initial_s, max_s)
    while delay < max_s:
        yield delay
        delay = min(max_s, delay * 2)
    yield from itertools.repeat(max_s)


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
