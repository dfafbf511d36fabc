"""A source task's records with their metadata (`processor.pipeline.meta.Meta`), for a
source whose pipeline uses it: the value and key decoded, headers, timestamp, position.

Record by record (a pipeline without metadata decodes its batches in C loops instead, in
`processor.runtime.source`); a record whose value or key does not decode is refused, to be
written to the DLQ as it came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from processor.models.limits import EVENT_TIME_LIMIT, event_time_error
from processor.pipeline.api import Node
from processor.pipeline.meta import Meta, decode_key
from processor.pipeline.ops import RecordError, decode


@dataclass
class Read:
    """A batch's decoded values, their metas, the messages they came from (in order), and
    the refused messages with why."""

    values: list[Any] = field(default_factory=list)
    metas: list[Meta] = field(default_factory=list)
    kept: list[Message] = field(default_factory=list)
    refused: list[tuple[Message, RecordError]] = field(default_factory=list)


def read(msgs: list[Message], head: Node) -> Read:
    """The data messages of ``msgs`` (no error, a non-empty value) for ``head``'s stage."""
    out = Read()
    value_format, key_format = head.value_format, head.key_format
    # Kafka's timestamp is the event time unless the source has a function for it.
    check_time = head.timed and head.timestamp_fn is None
    for msg in msgs:
        raw = msg.value()
        if msg.error() is not None or not raw:
            continue
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
