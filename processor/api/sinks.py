"""Sinks with a key function, a value format or serde, or headers: how their records encode.

`SinkSpec` (`processor.api.targets`) says what a sink does. A sink with the defaults (key
``str(key)``, value JSON, no headers) has no `SinkSpec` and takes `StageChain`'s own batch
path, which this module never touches: word count pays nothing for it. A sink with a spec
encodes record by record here; a function that raises or returns the wrong type makes that
record dead, never the task (`processor.api.ops` `Unavailable` aside: a schema registry away
fails the task, which retries).

The key and value functions get the stream's key as the user knows it (``ops.key_of`` of
its text; None on an unkeyed stream) and the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor.api.ops import key_of, key_text, oversized, sink_key_of
from processor.api.targets import SinkSpec as SinkSpec  # re-exported: the engine reads it here
from processor.models.limits import HEADER_OVERHEAD, headers_size
from processor.serde.codec import RecordError, Unavailable, shown

SinkHeaders = list[tuple[str, bytes]]
Plain = tuple[bytes | None, bytes]
Headed = tuple[bytes | None, bytes, SinkHeaders]


def encode(
    spec: SinkSpec,
    batch: list[Any],
    keyed: bool,
    limit: int,
    dead: Callable[[Exception, Any], None],
) -> tuple[list[Plain], list[Headed]]:
    """A batch's records: those without headers, those with; ``dead(exc, value)`` for each
    record that cannot be written (a function failed, a wrong type, larger than ``limit``)."""
    plain: list[Plain] = []
    headed: list[Headed] = []
    key_fn, value_fn, headers_fn = spec.key, spec.value, spec.headers
    for item in batch:
        if keyed:
            text, value = item
            user_key = key_of(text)
        else:
            text, value, user_key = None, item, None
        try:
            if key_fn is not None:
                key = _key(key_fn(user_key, value))
            else:
                key = None if text is None else sink_key_of(text)
            raw = value_fn(user_key, value)
            size = len(raw) + (0 if key is None else len(key))
            extra: SinkHeaders | None = None
            if headers_fn is not None:
                extra, extra_size = _headers(headers_fn(user_key, value))
                size += extra_size
            if size > limit:
                raise oversized(size, limit)
        except Unavailable:
            raise  # no fault of the record's: the task retries
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            dead(exc, value)
            continue
        if extra:
            headed.append((key, raw, extra))
        else:
            plain.append((key, raw))
    return plain, headed


def encode_one(spec: SinkSpec, keyed: bool, key: Any, value: Any) -> Headed:
    """One record (``key``: the user's key of a keyed stream); raises what `encode` makes a
    dead record for (the reference execution's way)."""
    out: list[Exception] = []
    batch = [(key_text(key), value)] if keyed else [value]
    plain, headed = encode(spec, batch, keyed, 2**62, lambda exc, _v: out.append(exc))
    if out:
        raise out[0]
    if plain:
        return (*plain[0], [])
    return headed[0]


def _key(key: Any) -> bytes | None:
    if key is None or type(key) is bytes:
        return key
    if type(key) is str:
        try:
            return key.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate
            raise RecordError(f"key {shown(key)} is not UTF-8: {exc.reason}") from None
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    raise RecordError(f"key function returned {type(key).__name__}: expected str, bytes or None")


def _headers(headers: Any) -> tuple[SinkHeaders, int]:
    """A headers function's list of ``(str, bytes)`` (a str value is taken as UTF-8), and
    its size as a record counts it (`processor.models.limits.headers_size`). A list of
    ``(str, bytes)`` tuples, the usual answer, is taken as it is."""
    if type(headers) is list:
        size = 0
        for pair in headers:
            if type(pair) is not tuple or len(pair) != 2:
                break
            name, value = pair
            if type(name) is not str or type(value) is not bytes:
                break
            size += len(name) + len(value) + HEADER_OVERHEAD
        else:
            return headers, size
    out = _checked_headers(headers)
    return out, headers_size(out)


def _checked_headers(headers: Any) -> SinkHeaders:
    """`_headers` of anything else: each pair checked and converted, or a RecordError."""
    if headers is None:
        return []
    if not isinstance(headers, list | tuple):
        raise RecordError(f"headers function returned {type(headers).__name__}, not a list")
    out: SinkHeaders = []
    for pair in headers:
        if not isinstance(pair, tuple | list) or len(pair) != 2 or type(pair[0]) is not str:
            raise RecordError(f"header {shown(pair, 60)} is not a (str, bytes) pair")
        name, value = pair
        if type(value) is str:
            try:
                value = value.encode()
            except UnicodeEncodeError as exc:
                raise RecordError(f"header {name!r} is not UTF-8: {exc.reason}") from None
        elif isinstance(value, bytearray | memoryview):
            value = bytes(value)
        elif type(value) is not bytes:
            raise RecordError(f"header {name!r}: {type(value).__name__}, not bytes")
        out.append((name, value))
    return out
