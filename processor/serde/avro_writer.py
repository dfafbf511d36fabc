"""A faster Avro writer for the common case: a record of primitive fields.

fastavro's `schemaless_writer` interprets the schema for every record (about 3 µs for a
record of six fields). `record_writer` compiles a record of primitive fields (``null``,
``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``, ``bytes``, and unions of
``null`` with one of them) into one function that writes such a record in half that.

It writes only what it is sure of: a field's value of exactly the Python type its Avro type
takes (``int`` in the Avro type's range, ``str``, ``bytes``, ``float``, ``bool``, None).
Anything else (a subclass, a missing field, a number out of range, a lone surrogate) raises,
and `processor.serde.avro.Avro` writes that record with fastavro instead, which writes it or
says why not. So the bytes are fastavro's for every record (tests/unit/test_avro_writer.py
compares them on random records), and a schema it does not compile returns None.

>>> write = record_writer({"type": "record", "name": "Click",
...     "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}]})
>>> write({"page": "a", "n": -2})
b'\\x02a\\x03'
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

Writer = Callable[[Any], bytes]

_SMALL = 8192  # non-negative ints below this are one lookup
_GROUP = 1 << 14  # a varint written 14 bits (two bytes) at a time
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "string", "bytes")


@cache
def _tables() -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Built on first use: zigzag varints of small ints, and a varint's 14-bit groups (last
    and not last)."""
    low = [(c & 0x7F) | 0x80 for c in range(_GROUP)]  # a group's first byte, more to come
    middle = list(map(bytes, zip(low, [(c >> 7) | 0x80 for c in range(_GROUP)], strict=True)))
    last = [bytes((c,)) for c in range(0x80)]
    last += map(bytes, zip(low[0x80:], [c >> 7 for c in range(0x80, _GROUP)], strict=True))
    small = last[: 2 * _SMALL : 2]  # the zigzag of n >= 0 is 2n
    return small, last, middle


@cache
def _long_writer() -> Callable[[int], bytes]:
    """`long_bytes`, its tables bound once (a writer calls it per record: no lookup per call)."""
    small, last, middle = _tables()

    def write_long(n: int) -> bytes:
        if 0 <= n < _SMALL:
            return small[n]
        if not _LONG_MIN <= n <= _LONG_MAX:
            raise OverflowError(f"{n} is out of a long's range")
        z = (n << 1) ^ (n >> 63)
        if z < _GROUP:
            return last[z]
        parts = []
        while z >= _GROUP:
            parts.append(middle[z & (_GROUP - 1)])
            z >>= 14
        parts.append(last[z])
        return b"".join(parts)

    return write_long


def long_bytes(n: int) -> bytes:
    """``n`` as Avro writes an ``int`` or ``long``: zigzag, then a varint. ``n`` outside a
    long's range raises OverflowError."""
    return _long_writer()(n)


def _kind(field_type: Any) -> str | None:
    """A field's primitive type, or None for any other."""
    if isinstance(field_type, Mapping):
        if set(field_type) - {"type"}:  # a logical type, or a named or complex one
            return None
        field_type = field_type.get("type")
    return field_type if field_type in _PRIMITIVE else None


# The lines that write one value ``x`` of each type into ``p<i>``; any other value raises.
_TEMPLATES = {
    "null": ["if x is not None: raise TypeError", "p{i} = b''"],
    "boolean": ["if x.__class__ is not _bool: raise TypeError", "p{i} = _true if x else _false"],
    "int": [
        "if x.__class__ is not _int or not _imin <= x <= _imax: raise TypeError",
        "p{i} = _small[x] if 0 <= x < _nsmall else _lb(x)",
    ],
    "long": [
        "if x.__class__ is not _int: raise TypeError",
        "p{i} = _small[x] if 0 <= x < _nsmall else _lb(x)",
    ],
    "float": ["if x.__class__ is not _float: raise TypeError", "p{i} = _f32(x)"],
    "double": ["if x.__class__ is not _float: raise TypeError", "p{i} = _f64(x)"],
    "string": [
        "if x.__class__ is not _str: raise TypeError",
        "s = x.encode()",
        "n = _len(s)",
        "p{i} = (_small[n] if n < _nsmall else _lb(n)) + s",
    ],
    "bytes": [
        "if x.__class__ is not _bytes: raise TypeError",
        "n = _len(x)",
        "p{i} = (_small[n] if n < _nsmall else _lb(n)) + x",
    ],
}


def _field_lines(i: int, name: str, field_type: Any) -> list[str] | None:
    """The function's lines for field ``i``, or None if it has no primitive type."""
    lines = [f"x = v[{name!r}]"]
    kind = _kind(field_type)
    if kind is not None:
        return lines + [t.format(i=i) for t in _TEMPLATES[kind]]
    if not isinstance(field_type, list) or len(field_type) != 2 or "null" not in field_type:
        return None
    null = field_type.index("null")
    other = _kind(field_type[1 - null])
    if other is None or other == "null":
        return None
    branch = [t.format(i=i) for t in _TEMPLATES[other]]
    return [
        *lines,
        "if x is None:",
        f"    p{i} = {long_bytes(null)!r}",
        "else:",
        *(f"    {line}" for line in branch),
        f"    p{i} = {long_bytes(1 - null)!r} + p{i}",
    ]


def record_writer(schema: Any) -> Writer | None:
    """A function that writes a record of ``schema`` (parsed by fastavro or not) as
    fastavro's `schemaless_writer` does, raising on any value it is not sure of; None if
    ``schema`` is not a record of primitive fields."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        return None
    fields = schema.get("fields")
    if not isinstance(fields, list) or not fields:
        return None
    body: list[str] = []
    for i, field in enumerate(fields):
        name = field.get("name") if isinstance(field, Mapping) else None
        lines = _field_lines(i, name, field.get("type")) if isinstance(name, str) else None
        if lines is None:
            return None
        body += lines
    joined = ", ".join(f"p{i}" for i in range(len(fields)))
    source = "\n".join(
        ["def write(v):", *(f"    {line}" for line in body), f"    return b''.join(({joined},))"]
    )
    scope: dict[str, Any] = {
        "_lb": _long_writer(),
        "_small": _tables()[0],
        "_nsmall": _SMALL,
        "_len": len,
        "_bool": bool,
        "_int": int,
        "_float": float,
        "_str": str,
        "_bytes": bytes,
        "_imin": _INT_MIN,
        "_imax": _INT_MAX,
        "_true": b"\x01",
        "_false": b"\x00",
        "_f32": struct.Struct("<f").pack,
        "_f64": struct.Struct("<d").pack,
    }
    # The source is the templates above and the field names quoted by repr: nothing else.
    exec(compile(source, f"<avro writer {schema.get('name')}>", "exec"), scope)
    return scope["write"]  # type: ignore[no-any-return]
