"""The shuffle's JSON (and JSON sources') through orjson, with exactly the standard
library's semantics.

`dumps` and `loads` stand for ``json.dumps(v, ensure_ascii=False, separators=(",", ":"))
.encode()`` and ``json.loads`` (with `loads_deep` after a RecursionError), as the shuffle
used them before (issue #44); `try_loads` is orjson's part of `loads` alone, for a caller
that has its own way with what orjson leaves to the standard library. What either raised,
this raises too (the same exception type); what either returned, this returns, equal and of
the same types after a round trip through either decoder. orjson is only asked what it
answers the same way:

- ``dumps``: orjson writes NaN and ±Infinity as ``null`` and encodes UUIDs, enums (plain ones,
  which the standard library refuses, and mixed ones by their ``value``) and
  ``orjson.Fragment`` natively. So a body goes to orjson only if `_plain` finds nothing but
  exact str, int, bool, None, finite float, list, tuple and dict in it (C loops, a level of
  the tree at a time); anything else, and whatever orjson refuses (an int beyond 64 bits, a
  key that is not a str, a lone surrogate, nesting beyond its 254 levels), is encoded by the
  standard library, which raises or encodes as before.
- ``loads``: orjson reads an integer beyond 64 bits as a float, and accepts nesting to 1024
  levels where ``json.loads`` fails beyond about 990 (the callers refuse such a record). So a
  text with a run of 19 digits (every integer outside int64 has one) goes to the standard
  library, and one that may be deeper than `_DEPTH` is read inside `_WRAP` more levels of
  brackets, so that orjson refuses it beyond `_DEPTH`. Whatever orjson refuses (NaN and
  Infinity tokens, lone surrogate escapes, a byte-order mark, UTF-16) is read by the standard
  library as before; orjson accepts nothing it refuses (tests/unit/test_fastjson.py).
"""

from __future__ import annotations

import gc
import json
from itertools import chain
from math import isfinite
from typing import Any

import orjson

from processor.models.limits import json_problems, loads_deep

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# Dataclasses and datetimes to `_refuse` (so to the standard library), not encoded: a second
# fence, as `_plain` keeps every type but the plain ones from orjson.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_CHECK = _OPTIONS | orjson.OPT_PASSTHROUGH_SUBCLASS  # `encodes`: subclasses refused too
_NONE = type(None)
_SCALARS = frozenset({str, int, bool, _NONE})
_LEAVES = _SCALARS | {float}
_SEQUENCES = frozenset({list, tuple})
_PLAIN = _LEAVES | _SEQUENCES | {dict}
_IS_FLOAT = float.__instancecheck__
_referents = gc.get_referents
_LEVELS = 256  # deeper than orjson encodes (254): the standard library's (a cycle too)
_NODES = 1 << 20  # nodes looked into at most (a cycle through two references doubles them)

ORJSON_DEPTH = 1024  # the nesting orjson.loads accepts (checked by the tests)
_DEPTH = 960  # below what json.loads reaches on a fresh thread (about 990)
_WRAP = ORJSON_DEPTH - _DEPTH
_OPEN, _CLOSE = b"[" * _WRAP, b"]" * _WRAP
# Digits to "0", opening brackets to "[", anything else to " ": one C pass tells both.
_SHAPE = bytes(
    ord("0") if chr(c).isdigit() and c < 128 else ord("[") if c in b"[{" else ord(" ")
    for c in range(256)
)
_BIG_INT = b"0" * 19  # each int orjson reads as a float (< -2**63, > 2**64 - 1) has 19 digits


def _refuse(value: Any) -> Any:
    raise TypeError(f"not for orjson: {type(value).__name__}")


def dumps(body: Any) -> bytes:
    """``json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()``, the same
    value or the same exception (TypeError, ValueError, RecursionError)."""
    if _plain(body):
        try:
            return orjson.dumps(body, default=_refuse, option=_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # its limits: the standard library's answer
    return _ENCODE(body).encode()


def dumps_each(bodies: list[Any]) -> list[bytes] | None:
    """``[dumps(b) for b in bodies]`` when orjson writes every one of them, `_plain` asked
    once for the whole list (its C loops then cover the batch: a sink's 500 bids 0.16 µs
    each against 0.85 one by one); None when one is not plain or orjson refuses one (ask
    `dumps` one at a time, which answers or raises as the standard library does).

    >>> dumps_each([{"a": 1}, [True, None]]), dumps_each([{"a": 1}, {1, 2}])
    ([b'{"a":1}', b'[true,null]'], None)
    """
    if not _plain(bodies):
        return None
    try:
        return [orjson.dumps(body, default=_refuse, option=_OPTIONS) for body in bodies]
    except orjson.JSONEncodeError:
        return None


def encodes(value: Any) -> bool:
    """True only if `dumps` encodes ``value``; False when not known (ask `dumps`). A check
    for a hot path that needs no bytes (a state's ``set``): orjson writes the value and reads it
    back, equal (a 40-byte state 0.4 µs against `dumps`' 1.3, a 670-byte one 4.0 against 5.1).

    Of what orjson writes natively, only the plain types read back equal: UUIDs, enums (by
    their value) and ``orjson.Fragment`` compare equal to their own type alone, NaN and
    ±Infinity read back as None, tuples as lists, and subclasses, dataclasses and datetimes are
    refused here (`_CHECK`). So an equal round trip holds nothing but the standard library's
    plain types. The one way around it is an enum class of the user's whose ``__eq__`` says it
    equals its value: then the caller's later `dumps` refuses it (a state's flush: a dead
    record then, not at ``set``).

    >>> encodes({"a": [1, "b", None]}), encodes({"a": (1,)}), encodes(float("nan"))
    (True, False, False)
    """
    try:
        return bool(orjson.loads(orjson.dumps(value, default=_refuse, option=_CHECK)) == value)
    except Exception:  # noqa: BLE001 - orjson's refusal, or an odd __eq__: not known
        return False


def loads(raw: bytes) -> Any:
    """``json.loads(raw)`` (`loads_deep` after a RecursionError): the same value or the same
    exception (ValueError, RecursionError)."""
    value = try_loads(raw)
    if value is not MISSING:
        return value
    try:
        return json.loads(raw)
    except RecursionError:  # a deep value encoded in a shallower stack than this one
        return loads_deep(raw)


def loads_batch(raws: list[bytes]) -> list[Any] | None:
    """A JSON source's batch: ``[json.loads(r) for r in raws]``, or None if a record is not
    for the pipeline (no JSON, or a `json_problem`: the caller goes record by record). One
    join of the batch serves `try_loads`' shape check and `json_problems` (a batch of 500
    Nexmark events 1.05 µs an event against 1.43 one by one)."""
    joined = b"\n".join(raws)
    try:
        if _BIG_INT in joined.translate(_SHAPE) or max(map(len, raws), default=0) > 2 * _DEPTH:
            values = [loads(raw) for raw in raws]
        else:  # no record deep or long enough to need `try_loads`' wrapping
            try:
                values = [orjson.loads(raw) for raw in raws]
            except orjson.JSONDecodeError:
                values = [loads(raw) for raw in raws]  # what orjson refuses: the stdlib's
        return None if json_problems(raws, values, joined) else values
    except (ValueError, RecursionError):
        return None


MISSING: Any = object()  # `try_loads`: ask the standard library
_ESCAPED = object()


def try_loads(raw: bytes) -> Any:
    """orjson's reading of ``raw`` where it equals ``json.loads``'s (on a stack with room
    for `_DEPTH` levels), else `MISSING`: a text orjson refuses, with a run of 19 digits,
    or deeper than `_DEPTH`."""
    shape = raw.translate(_SHAPE)
    if _BIG_INT in shape:
        return MISSING
    try:
        if len(raw) <= 2 * _DEPTH or shape.count(b"[") <= _DEPTH:
            return orjson.loads(raw)
        value = _unwrap(orjson.loads(b"".join((_OPEN, raw, _CLOSE))))
    except orjson.JSONDecodeError:
        return MISSING
    return MISSING if value is _ESCAPED else value


def _unwrap(wrapped: Any) -> Any:
    """The value inside `_WRAP` lists of one item, or `_ESCAPED`: text that closes a bracket
    of ours (``1],[2``) leaves a level with more than one item (or is no JSON at all)."""
    value = wrapped
    for _ in range(_WRAP):
        if type(value) is not list or len(value) != 1:
            return _ESCAPED
        value = value[0]
    return value


def _plain(body: Any) -> bool:
    """Whether ``body`` holds nothing but exact str, int, bool, None, finite float, list,
    tuple and dict: C loops over a level of the tree at a time, the next level being what
    the containers of this one hold (``gc.get_referents``: a list's or tuple's items, a
    dict's values, and its keys unless all are exact str, which orjson takes as the standard
    library does; other keys are orjson's to refuse)."""
    level: Any = body if type(body) is list else [body]
    seen = 0
    for _ in range(_LEVELS):
        types = set(map(type, level))
        if types <= _SCALARS:
            return True
        if not types <= _PLAIN:
            return False
        if float in types and not isfinite(sum(filter(_IS_FLOAT, level))):
            return False  # a sum of finite floats may overflow too: the slow path, still right
        if types <= _LEAVES:
            return True
        if types <= _SEQUENCES and set(map(type, chain.from_iterable(level))) <= _SCALARS:
            return True  # pairs of scalars (word count's): no list of the next level
        seen += len(level)
        if seen > _NODES:
            return False  # a cycle of more than one reference (or a huge body): the stdlib's
        level = _referents(*level)
    return False
