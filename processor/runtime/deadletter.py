"""Records the pipeline cannot handle go to ``<job>.dlq``, inside the task's transaction.

Inside it, so that a dead record is written exactly once, like the output it is missing from.
Headers say where it came from and why: a source record (undecodable, or refused by an
operator of the source's stage while it was still that record) is written as it was, with
its key, and headers naming its topic, partition and offset; any other dead record is a short
repr of the value, with the task. Both name the error, and the operator when there is one.

A dead record is never too large for the DLQ itself: past the record limit its value (then
its key) keeps a prefix, and a ``truncated`` header gives the original length.

Every dead record is counted (``processor_records_skipped_total`` by reason) and logged: the
first of each reason and operator at once, with the traceback of a user function's error,
then at most one line per minute saying how many more came.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

from confluent_kafka import Message
from prometheus_client import Counter as Metric

from processor import metrics
from processor.kafka.output import TransactionalOutput
from processor.models.limits import HEADER_OVERHEAD, headers_size
from processor.pipeline.chain import MAX_ERROR, DeadRecord
from processor.pipeline.ops import RecordError

log = logging.getLogger(__name__)

REPORT_EVERY_S = 60.0
_Headers = list[tuple[str, bytes]]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")  # an error may quote a lone surrogate


class DeadLetters:
    """One task's dead records: into the DLQ topic of its transaction, counted and logged."""

    def __init__(self, dlq: str, task: str, labels: Mapping[str, str], limit: int) -> None:
        self.topic = dlq
        self.task = task
        self.limit = limit  # of a record, key and headers included
        self._labels = dict(labels)
        self._counters: dict[str, Metric] = {}
        # (reason, operator, exception type) -> when last logged / how many since
        self._reported: dict[tuple[str, str, str], float] = {}
        self._since: Counter[tuple[str, str, str]] = Counter()

    def source_record(
        self,
        out: TransactionalOutput,
        msg: Message,
        error: str,
        reason: str,
        operator: str | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """A source record dead as it came: at decoding, or at ``operator``."""
        headers: _Headers = [
            ("source.topic", _utf8(msg.topic() or "")),
            ("source.partition", b"%d" % (msg.partition() or 0)),
            ("source.offset", b"%d" % (msg.offset() or 0)),
        ]
        if operator is not None:
            headers += [("task", _utf8(self.task)), ("operator", _utf8(operator))]
        headers.append(("error", _utf8(error[:MAX_ERROR])))
        self._write(out, msg.value() or b"", msg.key(), headers)
        self._note(reason, operator or "decoding", error, exc)

    def failed(
        self,
        out: TransactionalOutput,
        dead: list[DeadRecord],
        origin: Callable[[int], Message] | None = None,
        again: bool = False,
    ) -> None:
        """Records an operator refused; ``origin``: the source record of a dead record's
        `DeadRecord.origin`, when the task has it; ``again``: written before into a
        transaction that was aborted (counted and logged then)."""
        for record in dead:
            if origin is not None and record.origin is not None:
                msg = origin(record.origin)
                self.source_record(
                    out, msg, record.error, record.reason, record.operator, record.exc
                )
                continue
            headers: _Headers = [
                ("task", _utf8(self.task)),
                ("operator", _utf8(record.operator)),
                ("error", _utf8(record.error[:MAX_ERROR])),
            ]
            self._write(out, _utf8(record.value), None, headers)
            if not again:
                self._note(record.reason, record.operator, record.error, record.exc)

    def _write(
        self, out: TransactionalOutput, value: bytes, key: bytes | None, headers: _Headers
    ) -> None:
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

    def _note(self, reason: str, where: str, error: str, exc: BaseException | None) -> None:
        counter = self._counters.get(reason)
        if counter is None:
            counter = metrics.records_skipped.labels(**self._labels, reason=reason)
            self._counters[reason] = counter
        counter.inc()
        key = (reason, where, type(exc).__name__ if exc is not None else "")
        now = time.monotonic()
        last = self._reported.get(key)
        if last is not None and now - last < REPORT_EVERY_S:
            self._since[key] += 1
            return
        self._reported[key] = now
        more = self._since.pop(key, 0)
        # A user function's traceback says where it failed; the engine's own refusals
        # (RecordError) say all in their message.
        trace = exc if exc is not None and not isinstance(exc, RecordError) else None
        log.warning(
            "%s: a dead record (%s at %s) into %s: %s%s",
            self.task,
            reason,
            where,
            self.topic,
            error[:MAX_ERROR],
            f" ({more} more since the last report)" if more else "",
            exc_info=trace,
        )
