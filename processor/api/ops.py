"""What each operator does to one value: shared by the engine and the reference execution.

Pure functions, no I/O. Values are whatever the user's functions return; on the wire (sinks,
shuffles) they are JSON, and keys are hashed and stored by their canonical JSON text.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from processor.api.node import AggregateNode, AggregationNode, CountNode, ReduceNode, SumNode
from processor.models import fastjson
from processor.models.limits import (
    EVENT_TIME_LIMIT,
    event_time_error,
)
from processor.serde.codec import (
    RecordError,
    shown,
)

_UNSET = object()


def oversized(size: int, limit: int) -> RecordError:
    """The error of a record of ``size`` bytes that Kafka would refuse."""
    return RecordError(
        f"a record of {size} bytes: larger than Kafka takes ({limit}, from message.max.bytes)",
        "oversized_record",
    )


_TAGGED = "\0"  # starts the text of a key that is not a plain string
TAGGED = _TAGGED


def key_text(key: Any) -> str:
    """A key's identity for shuffling and state, as text: a string is itself (the common case
    costs nothing), anything else NUL + canonical JSON, so 1 and "1" stay different."""
    if type(key) is str and not key.startswith(_TAGGED):
        return key
    try:
        return _TAGGED + json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise RecordError(f"key {shown(key)} is nested too deeply", "too_deep") from None
    except (TypeError, ValueError) as exc:
        raise RecordError(f"key {shown(key)} is not JSON-encodable: {exc}") from None


def key_of(text: str) -> Any:
    """The key whose ``key_text`` is ``text``."""
    if not text.startswith(_TAGGED):
        return text
    body = text[1:]
    if body.isascii() and body.isdigit() and (body[0] != "0" or body == "0"):
        return int(body)  # what json.loads reads of it (an int key, the common case), 10x faster
    return json.loads(body)


def sink_key(key: Any) -> bytes:
    """A sink record's key: ``str(key)`` in UTF-8."""
    try:
        return str(key).encode()
    except UnicodeEncodeError as exc:  # a lone surrogate a function made
        raise RecordError(f"key {shown(key)} is not UTF-8: {exc.reason}") from None


def sink_key_of(text: str) -> bytes:
    """``sink_key(key_of(text))``, without the detour for the common plain string key."""
    if text[:1] != _TAGGED:
        return sink_key(text)
    return sink_key(key_of(text))


def load_value(raw: bytes) -> Any:
    """A value stored by ``sink_value`` (state uses the same encoding)."""
    if raw[:1] in _INT_START:  # not a dict's or a list's: no exception raised to find that
        try:
            return int(raw)  # what sink_value wrote for an int; anything else is not an int
        except ValueError:
            pass
    return fastjson.loads(raw)  # json.loads's value, through msgspec where it is the same


_INT_START = b"-0123456789"


def folder(node: AggregationNode) -> Callable[[Any, Any], Any]:
    """``acc, value -> acc`` for an aggregation; ``acc`` is ``_UNSET`` before the first value."""
    if isinstance(node, CountNode):
        return lambda acc, _value: 1 if acc is _UNSET else acc + 1
    if isinstance(node, SumNode):
        return lambda acc, value: _addend(value) if acc is _UNSET else acc + _addend(value)
    if isinstance(node, ReduceNode):
        fn = node.fn
        return lambda acc, value: value if acc is _UNSET else fn(acc, value)
    if isinstance(node, AggregateNode):
        add, initial = node.fn, node.initial
        # A fresh copy per key: an add() that mutates its accumulator must not share one.
        return lambda acc, value: add(copy.deepcopy(initial) if acc is _UNSET else acc, value)
    raise ValueError(f"{node!r} is not an aggregation")


def merger(node: AggregationNode) -> Callable[[Any, Any], Any]:
    """``acc, partial -> acc`` merging two partial aggregates of ``node`` (a combiner's, or
    two session windows'): one that is `AggregationNode.mergeable`."""
    if isinstance(node, CountNode | SumNode):
        return lambda acc, partial: partial if acc is _UNSET else acc + partial
    if isinstance(node, ReduceNode):
        fn = node.fn
    elif isinstance(node, AggregateNode) and node.merge is not None:
        fn = node.merge
    else:
        raise ValueError(f"{node!r} does not merge partial aggregates")
    return lambda acc, partial: partial if acc is _UNSET else fn(acc, partial)


def _addend(value: Any) -> Any:
    """A value ``sum()`` adds: a number (not a bool). Anything else is a dead record, whatever
    came before it: with a string among numbers the sum (``"1" + "2"``) and which records
    fail would depend on the order the values arrive in, which shuffles do not keep."""
    if type(value) is int or type(value) is float:
        return value
    raise RecordError(f"not a number: sum of {shown(value)}")


UNSET = _UNSET


def event_time(fn: Callable[[Any], Any], value: Any) -> int:
    """A source's ``timestamp(value)`` as event-time ms; RecordError if it is not a number
    of ms Kafka and the watermarks can carry (NaN and infinities too)."""
    ts = fn(value)
    if type(ts) is not int and type(ts) is not float:
        raise RecordError(f"timestamp {shown(ts, 40)} is not a number of ms")
    if not -EVENT_TIME_LIMIT < ts < EVENT_TIME_LIMIT:
        raise RecordError(event_time_error(ts), "bad_event_time")
    return int(ts)
