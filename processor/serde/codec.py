"""Values to bytes and back, for the built-in formats and any serde, with the errors that make
a record dead (`RecordError`) or the task retry (`Unavailable`). Pure functions."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from processor.models.fastjson import MISSING, dumps, dumps_each, try_loads
from processor.models.limits import MAX_JSON_DEPTH, json_problem
from processor.serde.protocol import Serde


class RecordError(Exception):
    """A record that an operator or the encoding could not handle: it goes to the DLQ.

    ``reason``: its label in ``processor_records_skipped_total``."""

    def __init__(self, message: str, reason: str = "function_error") -> None:
        super().__init__(message)
        self.reason = reason


class Unavailable(Exception):
    """Something a record's encoding needs is away (a schema registry that does not answer):
    no fault of the record's, so not a dead record. The task fails and retries."""


def shown(value: Any, width: int = 80) -> str:
    """``repr(value)``, cut to ``width`` characters; never raises (a value may be nested too
    deeply for repr, or be a user's object whose repr fails)."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"
    except Exception as exc:  # noqa: BLE001 - a user's __repr__: show what failed instead
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return text[:width]


def decode(value_format: str | Serde, raw: bytes) -> Any:
    """A source record's value as the pipeline sees it; RecordError if it does not decode
    (or is JSON no pipeline could write again: see `processor.models.limits`). A serde's
    ``loads`` may raise anything: that is a RecordError too."""
    if type(value_format) is not str:
        return _loads(value_format, raw)  # type: ignore[arg-type]
    if value_format == "bytes":
        return raw
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8: {exc.reason} at byte {exc.start}", "non_utf8") from None
    if value_format == "text":
        return text
    # msgspec where it reads as json.loads does (processor.models.fastjson), except that a
    # value too deep to take may be one json.loads refuses here (RecursionError): its own error.
    value = try_loads(raw)
    problem = None if value is MISSING else json_problem(raw, value)
    if value is MISSING or (problem is not None and problem[0] == "too_deep"):
        try:
            value = json.loads(text)
        except RecursionError:
            error = f"not JSON: nested deeper than {MAX_JSON_DEPTH} levels"
            raise RecordError(error, "too_deep") from None
        except ValueError as exc:
            raise RecordError(f"not JSON: {exc}", "not_json") from None
        problem = json_problem(raw, value)
    if problem is not None:
        reason, error = problem
        raise RecordError(error, reason)
    return value


def _loads(serde: Serde, raw: bytes) -> Any:
    try:
        return serde.loads(raw)
    except (RecordError, Unavailable):
        raise
    except RecursionError:
        raise RecordError(f"{_name(serde)}: nested too deeply", "too_deep") from None
    except Exception as exc:  # a serde's own failure: the record is dead
        error = f"{_name(serde)} cannot decode it: {type(exc).__name__}: {exc}"
        raise RecordError(error, "serde_error") from exc


def serde_dumps(serde: Serde, value: Any) -> bytes:
    """``serde.dumps(value)``, checked: bytes, or a RecordError naming what failed."""
    try:
        raw = serde.dumps(value)
    except (RecordError, Unavailable):
        raise
    except RecursionError:
        raise RecordError(f"value {shown(value)} is nested too deeply", "too_deep") from None
    except Exception as exc:  # a serde's own failure: the record is dead
        error = f"{_name(serde)} cannot encode {shown(value)}: {type(exc).__name__}: {exc}"
        raise RecordError(error, "serde_error") from exc
    if type(raw) is not bytes:
        if not isinstance(raw, bytearray | memoryview):
            raise RecordError(f"{_name(serde)}.dumps returned {type(raw).__name__}, not bytes")
        raw = bytes(raw)
    return raw


def _name(serde: object) -> str:
    return type(serde).__name__


def sink_values(values: list[Any]) -> list[bytes]:
    """``[sink_value(v) for v in values]``, in C loops where it can (counts, plain JSON);
    the `RecordError` of the first value that has none otherwise."""
    if set(map(type, values)) == _INTS:
        with contextlib.suppress(ValueError):  # an int of 4,300 digits: its RecordError below
            return [b"%d" % value for value in values]
    else:
        encoded = dumps_each(values)
        if encoded is not None:
            return encoded
    return [sink_value(value) for value in values]


_INTS = {int}


def sink_value(value: Any) -> bytes:
    """A sink record's value, and a stored state value: the value as JSON text (so a count
    is decimal text), ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` in
    UTF-8, through orjson where it gives the same (`processor.models.fastjson.dumps`)."""
    try:
        if type(value) is int:
            return b"%d" % value  # the common case (counts), ten times faster than json.dumps
        if isinstance(value, bytes):
            raise RecordError("bytes are not JSON-encodable: decode them or map them to text")
        return dumps(value)
    except RecursionError:
        raise RecordError(f"value {shown(value)} is nested too deeply", "too_deep") from None
    except (TypeError, ValueError) as exc:  # a lone surrogate, an int of 4,300 digits, a set
        raise RecordError(f"value {shown(value)} is not JSON-encodable: {exc}") from None
