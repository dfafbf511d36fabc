"""One coordinator per job: a lease on ``<job>.control`` fenced by a Kafka transactional id.

Two coordinators of one job (two deployments with one ``PROCESSOR_JOB_NAME``, or a restart
while the old one still runs) used to run side by side, each assigning tasks and triggering
checkpoints: the workers were moved back and forth and nobody said why (issue 25).

The lease holder renews it every ``RENEW_S``: a ``Lease`` record on the control topic, in a
transaction of the transactional id ``<job>.coordinator``. A coordinator that starts reads
the control topic's recent records:

- no lease renewed by another incarnation within ``EXPIRE_S``: it takes the lease at once;
- one renewed recently: it watches for ``EXPIRE_S``. A renewal in that time means another
  coordinator is alive: this one exits with one line naming it (``CoordinatorConflict``).
  None means the holder died or hangs (a SIGSTOPped zombie): this one takes over.

Taking the lease is ``init_transactions`` on the shared transactional id, which fences the
previous holder's producer: a zombie that wakes up fails its next renewal, and exits with
the same kind of line. The decision is ``decide`` (pure); the Kafka I/O is ``CoordinatorLease``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Literal, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from processor import backoff
from processor.config import Settings, SettingsError
from processor.kafka import clients
from processor.models import control

log = logging.getLogger(__name__)

RENEW_S = 1.0
EXPIRE_S = 5.0  # no renewal for this long: the holder is dead or hung
LOOKBACK = 2000  # control records read back at start to find the last lease
COMMIT_TIMEOUT_S = 10.0


class CoordinatorConflict(SettingsError):
    """Another coordinator of the job holds the lease, or took it from this one."""


@dataclass(frozen=True)
class Seen:
    """The newest lease another incarnation renewed, and how long ago (seconds)."""

    incarnation: str
    age_s: float


def decide(
    seen: Seen | None, renewed_while_watching: bool, watched_s: float
) -> Literal["take", "watch", "conflict"]:
    """What a starting coordinator does, given the newest lease of another incarnation, and
    whether that incarnation renewed it while this one watched for ``watched_s``.

    >>> decide(None, False, 0.0)
    'take'
    >>> decide(Seen("a1", 0.5), False, 0.0)
    'watch'
    >>> decide(Seen("a1", 0.5), True, 1.2)
    'conflict'
    >>> decide(Seen("a1", 0.5), False, 5.0)
    'take'
    """
    if seen is None or seen.age_s >= EXPIRE_S:
        return "take"
    if renewed_while_watching:
        return "conflict"
    return "take" if watched_s >= EXPIRE_S else "watch"


def conflict_line(job: str, other: str, fenced: bool) -> str:
    if fenced:
        return (
            f"another coordinator of job {job} took over (this one was fenced): two "
            "deployments with one PROCESSOR_JOB_NAME, or this one hung for longer than "
            f"{EXPIRE_S:.0f}s"
        )
    return (
        f"job {job} already has a running coordinator (incarnation {other}, renewed its "
        f"lease within {EXPIRE_S:.0f}s): two deployments with one PROCESSOR_JOB_NAME? Stop "
        "the other one, or give this job another name"
    )


class CoordinatorLease:
    """The lease of one coordinator incarnation: ``acquire`` once, then it renews itself
    from a daemon thread; ``lost`` is set (with ``reason``) when it is fenced."""

    def __init__(self, settings: Settings, incarnation: str) -> None:
        self._settings = settings
        self.incarnation = incarnation
        self.lost = threading.Event()
        self.reason = ""
        self._producer = clients.producer(
            settings,
            **{
                "transactional.id": f"{settings.job_name}.coordinator",
                "linger.ms": 0,
                "compression.type": "none",
            },
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._committing = False  # a commit failed retriably: call commit_transaction again

    def acquire(self, stop: threading.Event) -> bool:
        """Take the lease (False: stopped while waiting); CoordinatorConflict if another
        coordinator of the job is alive."""
        s = self._settings
        consumer = clients.consumer(s, **{"group.id": f"{s.job_name}.lease-{uuid.uuid4().hex}"})
        try:
            tp = TopicPartition(s.control_topic, 0)
            low, high = clients.watermark_offsets(consumer, tp)
            consumer.assign([TopicPartition(s.control_topic, 0, max(low, high - LOOKBACK))])
            newest = self._newest_other(consumer, high)
            seen = Seen(newest[0], time.time() - newest[1]) if newest else None
            started = time.monotonic()
            said = False
            while True:
                watched = time.monotonic() - started
                renewed = seen is not None and self._renewed_by(consumer, seen.incarnation)
                verdict = decide(seen, renewed, watched)
                if verdict == "take":
                    break
                if verdict == "conflict":
                    assert seen is not None
                    raise CoordinatorConflict(conflict_line(s.job_name, seen.incarnation, False))
                if not said:  # once: the wait may last EXPIRE_S
                    said = True
                    log.info(
                        "coordinator %s renewed its lease %.1fs ago: waiting up to %.0fs for "
                        "it to renew again (then it is dead or hung, and this one takes over)",
                        seen.incarnation if seen else "?",
                        seen.age_s if seen else 0.0,
                        EXPIRE_S,
                    )
                if stop.wait(0.2):
                    return False
        finally:
            consumer.close()
        # Fences whichever producer held the transactional id before: a zombie coordinator
        # fails its next renewal.
        self._producer.init_transactions(60)
        self._renew()
        self._thread = threading.Thread(target=self._run, name="coordinator-lease", daemon=True)
        self._thread.start()
        return True

    def _newest_other(self, consumer: Consumer, high: int) -> tuple[str, float] | None:
        """(incarnation, renewed at) of the newest lease of another incarnation up to
        ``high``."""
        newest: tuple[str, float] | None = None
        position = 0
        deadline = time.monotonic() + 30
        tp = TopicPartition(self._settings.control_topic, 0)
        while position < high and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is not None or not msg.value():
                    continue
                message = lease_renewal(msg.value() or b"")
                if message is not None and message.incarnation != self.incarnation:
                    newest = (message.incarnation, message.renewed_at)
            # The consumer's position moves past transaction markers (the leases' own), which
            # are never returned and can be the topic's last offsets.
            position = consumer.position([tp])[0].offset
        return newest

    def _renewed_by(self, consumer: Consumer, incarnation: str) -> bool:
        for msg in consumer.consume(100, 0.05):
            if msg.error() is None and msg.value():
                message = lease_renewal(msg.value() or b"")
                if message is not None and message.incarnation == incarnation:
                    return True
        return False

    def _run(self) -> None:
        while not self._stop.wait(RENEW_S):
            self._renew()
            if self.lost.is_set():
                return

    def _renew(self) -> None:
        """One renewal in a transaction of its own; a fence ends the lease, anything else
        (the broker away a moment) waits for the next renewal.

        A commit that failed with a retriable error (its coordinator moving, a timeout) is
        still in progress in the producer: librdkafka wants ``commit_transaction`` called
        again, and answers anything else, an abort or the next ``begin_transaction``, with
        _CONFLICT, for ever (seen: after a SIGKILL of the broker leading the lease's
        transaction log partition, the lease was never renewed again). So the commit is
        retried until it completes, the transaction must be aborted, or the lease is fenced.
        """
        p = self._producer
        try:
            if self._committing:
                p.commit_transaction(COMMIT_TIMEOUT_S)
                self._committing = False
                return
            p.begin_transaction()
            lease = control.Lease(self.incarnation, time.time())
            p.produce(self._settings.control_topic, control.encode(lease))
            self._committing = True
            p.commit_transaction(COMMIT_TIMEOUT_S)
            self._committing = False
        except KafkaException as exc:
            self._failed(exc.args[0])

    def _failed(self, error: KafkaError) -> None:
        if error.fatal() or error.code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        ):
            self.reason = conflict_line(self._settings.job_name, "", True)
            self.lost.set()
            return
        log.warning("could not renew the coordinator lease: %s", error)
        if self._committing and error.retriable() and not error.txn_requires_abort():
            return  # the next renewal calls commit_transaction again
        self._committing = False
        try:
            self._producer.abort_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as again:
            if again.args[0].fatal():
                self.reason = conflict_line(self._settings.job_name, "", True)
                self.lost.set()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(COMMIT_TIMEOUT_S + 5)


def lease_renewal(raw: bytes) -> control.Lease | None:
    """A lease renewal in range: its time a number of seconds since 1970, and not further
    ahead of this clock than `MAX_CLOCK_SKEW_S` (a forged one from the future would look
    fresh for that long)."""
    message = control.decode(raw)
    if not isinstance(message, control.Lease) or control.ahead_of(message, time.time()):
        return None
    return message


class _Acquirable(Protocol):
    def acquire(self, stop: threading.Event) -> bool: ...


def acquire_waiting(
    lease: _Acquirable, settings: Settings, stop: threading.Event, max_delay_s: float = 10.0
) -> bool:
    """``lease.acquire``, tried again with a backoff while Kafka is away (False: stopped).

    A coordinator restarted while a broker is cut off used to exit here: reading the control
    topic's end timed out before its leadership moved (seen in the 3-broker chaos run), and
    no coordinator ran until someone restarted it. A fatal error (fenced, a missing ACL) and
    a live coordinator of the job (``CoordinatorConflict``) still end it.
    """
    for delay in backoff.doubling(max_s=max_delay_s):
        try:
            return lease.acquire(stop)
        except (KafkaException, TimeoutError) as exc:
            clients.check_denied(settings, exc)  # no ACL for <job>.coordinator: one line
            err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            if isinstance(err, KafkaError) and err.fatal():
                raise
            log.warning("taking the coordinator's lease: %s (next try in %.1fs)", exc, delay)
        if stop.wait(delay):
            return False
    raise AssertionError("unreachable: the delays never end")
