"""Purging the shuffle topic below what any keyed task could still need (``delete_records``).

The shuffle is transient: once a keyed task committed checkpoint n and dropped the snapshots
older than what it retains, records below the lowest offset a retained snapshot resumes at can
never be read again. Kafka Streams deletes such records of its repartition topics on its commit
interval (``repartition.purge.interval.ms``) and creates them with infinite retention; the same
here keeps the shuffle topic's size flat without a retention that could delete records a
checkpoint still needs.

One ``ShufflePurger`` per worker serves all its keyed tasks. It never blocks the caller (the
broker's answer arrives as a future), purges each partition at most once per interval, logs a
failure at most once per ``log_every_s`` and simply tries again at the next offer, and only
ever purges below an offset it was given.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics

log = logging.getLogger(__name__)


@dataclass
class PurgeSchedule:
    """When to purge one partition, and down to where. Pure: the caller passes the time."""

    interval_s: float
    purged: int = 0  # the log start the broker last reported (records below it are gone)
    in_flight: bool = False
    next_at: float = 0.0  # not before this (monotonic seconds)

    def due(self, now: float) -> bool:
        return not self.in_flight and now >= self.next_at

    def start(self, below: int, now: float) -> int | None:
        """The offset to purge below now, or None (not due, or nothing new to purge)."""
        if not self.due(now) or below <= self.purged:
            return None
        self.in_flight = True
        self.next_at = now + self.interval_s
        return below

    def finished(self, log_start: int) -> None:
        self.in_flight = False
        self.purged = max(self.purged, log_start)

    def failed(self) -> None:
        # Tried again at the first offer after the interval: the caller offers every commit.
        self.in_flight = False


@dataclass
class ErrorThrottle:
    """Lets one error through per ``period`` seconds and counts the ones held back. Pure."""

    period: float
    last: float | None = None
    held_back: int = 0

    def admit(self, now: float) -> int | None:
        """None: stay quiet; otherwise log now, mentioning this many errors held back."""
        if self.last is not None and now - self.last < self.period:
            self.held_back += 1
            return None
        self.last = now
        held, self.held_back = self.held_back, 0
        return held


class ShufflePurger:
    """Deletes records of ``topic`` below the offsets its keyed tasks offer. Thread-safe."""

    def __init__(
        self,
        admin: AdminClient,
        topic: str,
        job: str,
        interval_s: float,
        log_every_s: float = 60.0,
        request_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin = admin
        self.topic = topic
        self._job = job
        self._interval_s = interval_s
        self._timeout_s = request_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._schedules: dict[int, PurgeSchedule] = {}
        self._errors = ErrorThrottle(log_every_s)
        self._in_flight: set[Future[object]] = set()

    def due(self, partition: int) -> bool:
        """Whether an offer for ``partition`` would be acted on now (so that a caller can
        skip computing the offset otherwise)."""
        with self._lock:
            return self._schedule(partition).due(self._clock())

    def purge_below(self, partition: int, offset: int) -> None:
        """Delete the records of ``partition`` below ``offset``, in the background, if due."""
        with self._lock:
            below = self._schedule(partition).start(offset, self._clock())
        if below is None:
            return
        tp = TopicPartition(self.topic, partition, below)
        try:
            futures = self._admin.delete_records(
                [tp], request_timeout=self._timeout_s, operation_timeout=self._timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - local trouble (queue, arguments): next time
            self._failed(partition, below, exc)
            return
        for future in futures.values():
            with self._lock:
                self._in_flight.add(future)
            future.add_done_callback(
                lambda f, p=partition, b=below: self._done(f, p, b)  # type: ignore[misc]
            )

    def close(self, timeout: float = 5.0) -> None:
        """Wait a little for purges in flight (they are harmless to abandon)."""
        with self._lock:
            pending = list(self._in_flight)
        if pending:
            wait(pending, timeout)

    def _schedule(self, partition: int) -> PurgeSchedule:
        schedule = self._schedules.get(partition)
        if schedule is None:
            schedule = self._schedules[partition] = PurgeSchedule(self._interval_s)
        return schedule

    def _done(self, future: Future[object], partition: int, below: int) -> None:
        # On librdkafka's background thread: no blocking call here.
        with self._lock:
            self._in_flight.discard(future)
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 - the broker said no: next time
            self._failed(partition, below, exc)
            return
        log_start = int(getattr(result, "low_watermark", below))
        with self._lock:
            self._schedule(partition).finished(log_start)
        metrics.shuffle_purges.labels(job_name=self._job, outcome="ok").inc()
        metrics.shuffle_log_start_offset.labels(job_name=self._job, partition=str(partition)).set(
            log_start
        )
        log.debug("purged %s[%d] below %d", self.topic, partition, log_start)

    def _failed(self, partition: int, below: int, exc: BaseException) -> None:
        with self._lock:
            self._schedule(partition).failed()
            held = self._errors.admit(self._clock())
        metrics.shuffle_purges.labels(job_name=self._job, outcome="failed").inc()
        if held is not None:
            more = f" ({held} more failures since the last report)" if held else ""
            log.warning(
                "could not purge %s[%d] below %d: %s; trying again later%s",
                self.topic,
                partition,
                below,
                exc,
                more,
            )
