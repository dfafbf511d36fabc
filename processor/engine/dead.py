"""A dead record (`DeadRecord`): its error, its value as the DLQ writes it, and where it was
read (`Position`).

Pure and small: `StageChain` builds dead records here (only for dead records, never on the
path of the records that go through), the task that read one adds its position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from processor.serde.codec import RecordError, shown

MAX_ERROR = 1000  # characters of an error kept for the DLQ (a user's message may be huge)

# As a sink writes values (`codec.sink_value`), and an escaping twin for a lone surrogate.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_ASCII_JSON = json.JSONEncoder(separators=(",", ":"))


def dead_value(value: Any) -> bytes:
    """A dead record's value for the DLQ: its JSON, as a sink would write it.

    What JSON cannot carry still says what it was: ``bytes`` as they are, a lone surrogate
    escaped (``"\\ud800"``, still JSON), anything else (a set, an object, an int of 5,000
    digits, a value nested too deeply) its ``repr``. Never raises.

    >>> dead_value({"user": "u1", "n": 2})
    b'{"user":"u1","n":2}'
    >>> dead_value({1, 2})
    b'{1, 2}'
    """
    if isinstance(value, bytes):
        return value
    try:
        try:
            return _JSON.encode(value).encode()
        except UnicodeEncodeError:
            return _ASCII_JSON.encode(value).encode()
    except (TypeError, ValueError, RecursionError):
        return shown(value, 1 << 20).encode("utf-8", "backslashreplace")


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record was read: a topic, and its partition and offset when known.

    A source stage knows the input record's own position; a record derived from one (a
    ``flat_map``'s output) only its topic and partition. A keyed stage knows the shuffle
    record that brought it (one shuffle record carries many of them).

    >>> str(Position("cart-events", 2, 41))
    'cart-events[2]@41'
    """

    topic: str
    partition: int | None = None
    offset: int | None = None

    def headers(self) -> list[tuple[str, bytes]]:
        """The DLQ headers ``topic``, ``partition`` and ``offset``, those known."""
        out = [("topic", self.topic.encode("utf-8", "backslashreplace"))]
        if self.partition is not None:
            out.append(("partition", b"%d" % self.partition))
        if self.offset is not None:
            out.append(("offset", b"%d" % self.offset))
        return out

    def __str__(self) -> str:
        text = self.topic
        if self.partition is not None:
            text += f"[{self.partition}]"
        if self.offset is not None:
            text += f"@{self.offset}"
        return text


@dataclass(frozen=True)
class DeadRecord:
    operator: str
    error: str
    value: bytes  # for the DLQ record: its JSON (`dead_value`)
    reason: str = "function_error"  # its label in processor_records_skipped_total
    # The index, in the batch `StageChain.values` got, of the source value it is, if it is
    # one (the task writes that record's own bytes to the DLQ).
    origin: int | None = None
    # What failed, with its traceback (formatted only if logged or written: see deadletter).
    exc: BaseException | None = field(default=None, compare=False, repr=False)
    where: Position | None = None  # where it was read, set by the task that knows
    key: bytes | None = None  # of a source record written as it came: its Kafka key


def dead_record(operator: str, exc: Exception, value: Any, origin: int | None) -> DeadRecord:
    """The dead record of ``value``, which failed in ``operator`` with ``exc``: a
    `RecordError` by its own message and reason, a user function's failure by its type too."""
    if isinstance(exc, RecordError):
        error, reason = _text(exc), exc.reason
    else:
        error, reason = f"{type(exc).__name__}: {_text(exc)}", "function_error"
    return DeadRecord(operator, error[:MAX_ERROR], dead_value(value), reason, origin, exc)


def _text(exc: Exception) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ fails
        return f"<{type(exc).__name__} that cannot be shown>"
