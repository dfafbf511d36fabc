"""Records the pipeline cannot handle go to ``<job>.dlq``, inside the task's transaction, or,
with ``PROCESSOR_ON_ERROR=stop``, stop the task.

Inside the transaction, so that a dead record is written exactly once, like the output it is
missing from. A source record (undecodable, or refused by an operator of the source's stage
while it was still that record) is written as it came, key and value bytes; any other dead
record is its value's JSON (`processor.engine.dead.dead_value`). Headers say why and where:
``operator``, ``task``, ``error``, ``traceback`` (a user function's, at most 4 KB) and
``topic``/``partition``/``offset``, those known (`Position`).

``PROCESSOR_DLQ_MODE`` says how much of it the DLQ keeps, for data that must not be kept:
``full`` (the default) all of the above; ``metadata`` no bytes of the record and no error text
(which may quote them), only ``operator``, ``task``, ``reason``, ``error`` (the exception's
type), the position and ``length`` (``key.length``) of what was left out; ``off`` nothing.

A dead record is never too large for the DLQ itself: past the record limit its value (then
its key) keeps a prefix, and a ``truncated`` header gives the original length.

Every dead record is counted (``processor_records_skipped_total`` by reason) and logged
(`processor.worker.failures`: the first 10 per operator in full, then a line a minute).

With ``on_error="stop"`` nothing is written: the first dead record is logged at ERROR with
its traceback and position, and `StoppedOnError` ends the task; its open transaction is
aborted as the task closes, so nothing of the epoch is committed, and the record is read
again, and fails again, by whoever runs the task next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Message
from prometheus_client import Counter as Metric

from processor import metrics
from processor.config import Settings
from processor.engine.chain import MAX_ERROR, DeadRecord
from processor.engine.dead import Position
from processor.errors import PermanentTaskFailure
from processor.kafka.clients import record_limit
from processor.kafka.output import TransactionalOutput
from processor.models.limits import HEADER_OVERHEAD, headers_size
from processor.worker.failures import FailureLog, traceback_text, user_error

log = logging.getLogger(__name__)

_Headers = list[tuple[str, bytes]]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")  # an error may quote a lone surrogate


class StoppedOnError(PermanentTaskFailure):
    """``PROCESSOR_ON_ERROR=stop`` and a record failed: the task stops, and is not restarted
    where it stopped. Its message names the operator, the record's position and the error:
    the same each time the task reads that record again."""

    state = "stopped"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # the dead record's: its processor_task_stopped label


class DeadLetters:
    """One task's dead records: into the DLQ topic of its transaction, counted and logged."""

    def __init__(
        self,
        dlq: str,
        task: str,
        labels: Mapping[str, str],
        limit: int,
        on_error: str = "dlq",
        clock: Callable[[], float] = time.monotonic,
        mode: str = "full",
    ) -> None:
        self.topic = dlq
        self.mode = mode  # PROCESSOR_DLQ_MODE: full, metadata or off
        self.task = task
        self.limit = limit  # of a record, key and headers included
        self.stops = on_error == "stop"
        self._labels = dict(labels)
        self._counters: dict[str, Metric] = {}
        self.log = FailureLog(task, dlq, clock)

    @classmethod
    def of_task(cls, settings: Settings, task: str, labels: Mapping[str, str]) -> DeadLetters:
        """A task's, as the job's settings say (DLQ topic, record limit, on_error, mode)."""
        s = settings
        return cls(s.dlq_topic, task, labels, record_limit(s), s.on_error, mode=s.dlq_mode)

    def source_record(
        self,
        out: TransactionalOutput,
        msg: Message,
        error: str,
        reason: str,
        operator: str,
        exc: BaseException | None = None,
    ) -> None:
        """A source record dead as it came: at decoding (``operator``: the source's name),
        or at ``operator``."""
        where = Position(msg.topic() or "", msg.partition(), msg.offset())
        if self.stops:
            self._stop(operator, error, reason, exc, where)
        self._write(out, msg.value() or b"", msg.key(), operator, error, reason, exc, where)
        self._note(reason, operator, error, exc, where)

    def failed(
        self,
        out: TransactionalOutput,
        dead: list[DeadRecord],
        origin: Callable[[int], Message] | None = None,
        again: bool = False,
        where: Position | None = None,
    ) -> None:
        """Records an operator refused; ``origin``: the source record of a dead record's
        `DeadRecord.origin`, when the task has it; ``again``: written before into a
        transaction that was aborted (counted and logged then); ``where``: the position of
        a dead record that has none of its own (what the task knows: its topic and
        partition)."""
        for record in dead:
            if origin is not None and record.origin is not None:
                msg = origin(record.origin)
                self.source_record(
                    out, msg, record.error, record.reason, record.operator, record.exc
                )
                continue
            at = record.where or where
            if self.stops:
                self._stop(record.operator, record.error, record.reason, record.exc, at)
            self._write(
                out,
                record.value,
                record.key,
                record.operator,
                record.error,
                record.reason,
                record.exc,
                at,
            )
            if not again:
                self._note(record.reason, record.operator, record.error, record.exc, at)

    def tick(self) -> None:
        """Log the counts of dead records a minute old (see `FailureLog.tick`)."""
        self.log.tick()

    def _headers(
        self, operator: str, error: str, exc: BaseException | None, where: Position | None
    ) -> _Headers:
        headers: _Headers = [
            ("operator", _utf8(operator)),
            ("task", _utf8(self.task)),
            ("error", _utf8(error[:MAX_ERROR])),
        ]
        trace = user_error(exc)
        if trace is not None:
            headers.append(("traceback", traceback_text(trace)))
        if where is not None:
            headers += where.headers()
        return headers

    def _metadata(
        self,
        operator: str,
        reason: str,
        exc: BaseException | None,
        where: Position | None,
        value: bytes,
        key: bytes | None,
    ) -> _Headers:
        headers: _Headers = [
            ("operator", _utf8(operator)),
            ("task", _utf8(self.task)),
            ("reason", _utf8(reason)),
            ("error", _utf8(type(exc).__name__ if exc is not None else reason)),
            ("length", b"%d" % len(value)),
        ]
        if key is not None:
            headers.append(("key.length", b"%d" % len(key)))
        if where is not None:
            headers += where.headers()
        return headers

    def _write(
        self,
        out: TransactionalOutput,
        value: bytes,
        key: bytes | None,
        operator: str,
        error: str,
        reason: str,
        exc: BaseException | None,
        where: Position | None,
    ) -> None:
        if self.mode == "off":
            return
        if self.mode == "metadata":
            headers = self._metadata(operator, reason, exc, where, value, key)
            out.produce(self.topic, b"", key=None, headers=list(headers))
            return
        headers = self._headers(operator, error, exc, where)
        room = self.limit - headers_size(headers)
        key_len = len(key) if key is not None else 0
        if len(value) + key_len > room:
            # Room for the headers saying so; the value gives way first, then the key.
            room -= 2 * (HEADER_OVERHEAD + len("truncated.key") + 20)
            headers.append(("truncated", b"%d" % len(value)))
            if key is not None and key_len > room:
                headers.append(("truncated.key", b"%d" % key_len))
                key = key[:room]
                key_len = room
            value = value[: max(0, room - key_len)]
        out.produce(self.topic, value, key=key, headers=list(headers))

    def _note(
        self,
        reason: str,
        operator: str,
        error: str,
        exc: BaseException | None,
        where: Position | None,
    ) -> None:
        counter = self._counters.get(reason)
        if counter is None:
            counter = metrics.records_skipped.labels(**self._labels, reason=reason)
            self._counters[reason] = counter
        counter.inc()
        self.log.note(operator, reason, error[:MAX_ERROR], exc, where)

    def _stop(
        self,
        operator: str,
        error: str,
        reason: str,
        exc: BaseException | None,
        where: Position | None,
    ) -> None:
        at = f" of {where}" if where is not None else ""
        message = (
            f"a record{at} failed at {operator} ({reason}): {error[:MAX_ERROR]} "
            "(PROCESSOR_ON_ERROR=stop: the task stops, nothing of its epoch is committed)"
        )
        # The traceback of the engine's own refusals (RecordError) is its own code: the
        # message says it all. A user function's says where it failed.
        log.error("%s: %s", self.task, message, exc_info=user_error(exc))
        raise StoppedOnError(message, reason)
