"""Liveness of a service's main loop, served as ``/healthz``.

``/metrics`` is answered by its own HTTP thread, so it stays up while the main loop is stuck
(a hung Kafka call, a deadlock): a probe on it would never restart such a process. The main
loop calls ``beat()`` on every round, also while it waits for Kafka; ``/healthz`` answers 200
while the last beat is younger than the bound and 503 once it is older.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LoopHealth:
    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        # Starting counts as a beat: the bound covers the time to the first round.
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()  # one float store: the HTTP thread reads it without a lock

    def check(self) -> tuple[bool, str]:
        """Whether the main loop went round within the bound, and one line saying so."""
        age = self._clock() - self._last
        if age <= self.max_age_s:
            return True, f"ok: main loop went round {age:.1f} s ago\n"
        return False, (
            f"stuck: main loop last went round {age:.1f} s ago "
            f"(bound {self.max_age_s:.0f} s, PROCESSOR_HEALTH_TIMEOUT_MS)\n"
        )
