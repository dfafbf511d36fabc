"""When the coordinator triggers a checkpoint, and when it sends a pending one's trigger again.

Periodic, like Flink's with one checkpoint at a time (``maxConcurrentCheckpoints`` 1, no
minimum pause): a trigger that falls due while a checkpoint is still pending waits for it and
goes out as soon as it completes, so the effective interval is the longer of the configured
one and a checkpoint's duration. Rounding a late trigger up to the next whole interval instead
made a 1.2 s checkpoint a 2 s epoch, and an epoch of 2-3 s at capacity: more combining and
fewer transactions than a peer that commits at its interval, so not the same work.

Pure (the caller passes the clock), so the timing is unit-tested without Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TriggerSchedule:
    """The coordinator's two timers: the next trigger and the next resend of a pending one.

    Example::

        schedule = TriggerSchedule(interval_s=1.0, next_trigger=5.0)
        schedule.trigger_due(5.0)  # True: the caller triggers, then calls triggered(5.0)
        schedule.resend_due(6.0, pending=True)  # True: the checkpoint is still pending at 6.0
        schedule.trigger_due(6.4)  # True: it completed at 6.4, the next goes out at once
    """

    interval_s: float
    next_trigger: float
    next_resend: float = float("inf")

    def trigger_due(self, now: float) -> bool:
        """Whether a new checkpoint is due (the caller also needs none pending)."""
        return now >= self.next_trigger

    def triggered(self, now: float) -> None:
        """A checkpoint was triggered at ``now``."""
        self.next_trigger = now + self.interval_s
        self.next_resend = now + self.interval_s

    def resend_due(self, now: float, pending: bool) -> bool:
        """Whether to send the pending checkpoint's trigger again: every interval while it
        is pending (a source task that started after it went out acts on it then; one that
        acted already ignores it). The next trigger stays due meanwhile."""
        if not pending or now < self.next_resend:
            return False
        self.next_resend = now + self.interval_s
        return True
