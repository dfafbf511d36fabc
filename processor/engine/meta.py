"""How a record's metadata (`processor.api.context.Meta`) crosses a shuffle; a source's keys.

Only pipelines that use metadata carry it (the planner's ``Node.meta``, see
`processor.plan.stages`): a function given ``meta=True``, a source with ``key=``, or
``process`` (whose state handle has ``headers``). Others never build a `Meta`.

Across a shuffle a record keeps its event time and headers; its key is the shuffle's key;
its topic, partition and offset (of a source record) are gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from processor.api.context import Headers as Headers  # re-exported: the engine reads it here
from processor.api.context import Meta as Meta  # re-exported, as Headers
from processor.api.ops import key_of
from processor.serde.codec import RecordError, decode

# A header as it crosses a shuffle (in the shuffle record's JSON): the value's bytes as
# Latin-1 text (one character per byte: lossless and cheap), None for a null value.
WireHeaders = list[tuple[str, str | None]]


def decode_key(key_format: Any, raw: bytes | None) -> Any:
    """A source record's Kafka key in the source's ``key=`` format ("text", "json",
    "bytes", or an object with ``loads(bytes)``); None stays None (no key). RecordError if
    it does not decode."""
    if raw is None or key_format == "bytes":
        return raw
    if isinstance(key_format, str):
        try:
            return decode(key_format, raw)
        except RecordError as exc:
            raise RecordError(f"key {exc}", exc.reason) from None
    try:
        return key_format.loads(raw)
    except Exception as exc:  # noqa: BLE001 - a user's serde: its failure is the record's
        raise RecordError(f"key does not decode: {type(exc).__name__}: {exc}") from None


def to_wire(headers: Headers) -> WireHeaders:
    """Headers as a shuffle record carries them (JSON)."""
    if not headers:
        return []
    return [(n, None if v is None else bytes(v).decode("latin-1")) for n, v in headers]


def from_wire(wire: Sequence[Sequence[Any]]) -> Headers:
    """Headers back from a shuffle record (`to_wire`)."""
    if not wire:
        return []
    return [(n, None if v is None else v.encode("latin-1")) for n, v in wire]


def from_shuffle(body: list[list[Any]]) -> list[tuple[tuple[str, Meta], Any]]:
    """A shuffle record's ``[key text, value, event time, headers]`` items as a keyed
    stage's meta items ``((key text, meta), value)``; the meta's key is the stream's key.
    Items without metadata (``[key text, value(, time)]``: written by a version that did
    not ship it, before an upgrade) get a meta of their key (and time)."""
    if body and len(body[0]) == 4:
        return [((t, Meta(key_of(t), ts, from_wire(h))), v) for t, v, ts, h in body]
    return [((i[0], Meta(key_of(i[0]), i[2] if len(i) > 2 else None)), i[1]) for i in body]
