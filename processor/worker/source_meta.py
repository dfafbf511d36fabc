"""A source task's records with their metadata (`processor.engine.meta.Meta`), for a
source whose pipeline uses it: the value and key decoded, headers, timestamp, position.

A batch at once, as `processor.worker.source` decodes one without metadata, and record by
record only when a record in it is refused: its value or key does not decode (it is written
to the DLQ as it came).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from processor.api.node import SourceNode
from processor.engine.meta import Meta, decode_key
from processor.models import fastjson
from processor.models.limits import EVENT_TIME_LIMIT, event_time_error, in_range
from processor.serde.codec import RecordError, decode


@dataclass
class Read:
    """A batch's decoded values, their metas, the messages they came from (in order), and
    the refused messages with why."""

    values: list[Any] = field(default_factory=list)
    metas: list[Meta] = field(default_factory=list)
    kept: list[Message] = field(default_factory=list)
    refused: list[tuple[Message, RecordError]] = field(default_factory=list)


def read(msgs: list[Message], head: SourceNode) -> Read:
    """The data messages of ``msgs`` (no error, a non-empty value) for ``head``'s stage."""
    data = [m for m in msgs if m.error() is None and m.value()]
    fast = _read_batch(data, head)
    if fast is not None:
        return fast
    return _read_each(data, head)


def _read_batch(data: list[Message], head: SourceNode) -> Read | None:
    """`read` with the values decoded in C loops, as a source without metadata decodes
    them; None if a record is refused (then `_read_each` finds it)."""
    raws: list[bytes] = [m.value() for m in data]  # type: ignore[misc]
    value_format, key_format = head.value_format, head.key_format
    try:
        if value_format == "text":
            values: list[Any] = [r.decode() for r in raws]
        elif value_format == "json":
            json_values = fastjson.loads_batch(raws)  # as json.loads
            if json_values is None:
                return None
            values = json_values
        else:
            values = raws
        keys = [m.key() for m in data]
        if key_format is not None:
            keys = [decode_key(key_format, k) for k in keys]
    except (ValueError, RecursionError, RecordError):  # UnicodeDecodeError too
        return None
    times = [m.timestamp()[1] for m in data]
    if head.timed and head.timestamp_fn is None and not in_range(times):
        return None
    metas = [
        # A consumer's message has a list of (str, bytes | None) pairs, or None.
        Meta(k, t, m.headers() or [], m.topic(), m.partition(), m.offset())  # type: ignore[arg-type]
        for m, k, t in zip(data, keys, times, strict=True)
    ]
    return Read(values, metas, data)


def _read_each(data: list[Message], head: SourceNode) -> Read:
    out = Read()
    value_format, key_format = head.value_format, head.key_format
    # Kafka's timestamp is the event time unless the source has a function for it.
    check_time = head.timed and head.timestamp_fn is None
    for msg in data:
        raw: bytes = msg.value()  # type: ignore[assignment]
        ts = msg.timestamp()[1]
        try:
            if check_time and not -EVENT_TIME_LIMIT < ts < EVENT_TIME_LIMIT:
                raise RecordError(event_time_error(ts), "bad_event_time")
            value = decode(value_format, raw)
            key = msg.key() if key_format is None else decode_key(key_format, msg.key())
        except RecordError as exc:
            out.refused.append((msg, exc))
            continue
        # A consumer's message has a list of (str, bytes | None) pairs, or None.
        headers: Any = msg.headers() or []
        out.values.append(value)
        out.metas.append(Meta(key, ts, headers, msg.topic(), msg.partition(), msg.offset()))
        out.kept.append(msg)
    return out
