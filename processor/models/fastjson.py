"""The shuffle's JSON (and JSON sources') through orjson and msgspec, with exactly the
standard library's semantics.

`dumps` and `loads` stand for ``json.dumps(v, ensure_ascii=False, separators=(",", ":"))
.encode()`` and ``json.loads`` (with `loads_deep` after a RecursionError), as the shuffle
used them before (issue #44); `try_loads` is msgspec's part of `loads` alone, for a caller
that has its own way with what msgspec leaves to the standard library. What either raised,
this raises too (the same exception type); what either returned, this returns, equal and of
the same types after a round trip through either decoder. orjson and msgspec are only asked
what they answer the same way:

- ``dumps``: orjson writes NaN and ±Infinity as ``null`` and encodes UUIDs, enums (plain ones,
  which the standard library refuses, and mixed ones by their ``value``) and
  ``orjson.Fragment`` natively. So a body goes to orjson only if `_plain` finds nothing but
  exact str, int, bool, None, finite float, list, tuple and dict in it (C loops, a level of
  the tree at a time); anything else, and whatever orjson refuses (an int beyond 64 bits, a
  key that is not a str, a lone surrogate, nesting beyond its 254 levels), is encoded by the
  standard library, which raises or encodes as before.
- ``loads``: msgspec's JSON decoder (orjson reads an integer beyond 64 bits as a float, msgspec
  reads it exactly, with no scan of the text first, and is faster: a batch of Nexmark events
  0.58 µs an event against orjson's 0.67).
  Whatever msgspec refuses (NaN and Infinity tokens, a float beyond the double range, an int
  beyond Python's 4,300 digits, lone surrogates, a byte-order mark, UTF-16, nesting beyond
  the interpreter's recursion limit) is read by the standard library, which answers or raises
  as before; msgspec accepts nothing it refuses, and what it accepts it reads as the standard
  library does (tests/unit/test_fastjson.py). A value deeper than ``json.loads`` reaches on
  this stack is the one `loads` reads with `loads_deep` after json.loads' RecursionError.
"""

from __future__ import annotations

import gc
import json
from itertools import chain
from math import isfinite
from typing import Any

import msgspec
import orjson

from processor.models.limits import json_problems, loads_deep

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# Dataclasses and datetimes to `_refuse` (so to the standard library), not encoded: a second
# fence, as `_plain` keeps every type but the plain ones from orjson.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_NONE = type(None)
_SCALARS = frozenset({str, int, bool, _NONE})
_LEAVES = _SCALARS | {float}
_SEQUENCES = frozenset({list, tuple})
_PLAIN = _LEAVES | _SEQUENCES | {dict}
_IS_FLOAT = float.__instancecheck__
_referents = gc.get_referents
_LEVELS = 256  # deeper than orjson encodes (254): the standard library's (a cycle too)
_NODES = 1 << 20  # nodes looked into at most (a cycle through two references doubles them)

_DECODE = msgspec.json.Decoder().decode
# What msgspec raises for text it does not read as the standard library would (its own
# errors, UnicodeDecodeError for bytes that are no UTF-8, RecursionError): the stdlib's turn.
_REFUSED = (msgspec.MsgspecError, ValueError, RecursionError)


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
    for the pipeline (no JSON, or a `json_problem`: the caller goes record by record). One C
    loop over the batch (msgspec's), then `json_problems`' checks of the whole batch (a batch
    of 500 Nexmark events 0.8 µs an event against 1.1 with orjson and its 19-digit check)."""
    try:
        values = list(map(_DECODE, raws))
    except _REFUSED:
        values = None
    try:
        if values is None:
            values = [loads(raw) for raw in raws]  # what msgspec refuses: the stdlib's
        return None if json_problems(raws, values) else values
    except (ValueError, RecursionError):  # no JSON, or too deep to check: record by record
        return None


MISSING: Any = object()  # `try_loads`: ask the standard library


def try_loads(raw: bytes) -> Any:
    """msgspec's reading of ``raw``, which is ``json.loads``'s wherever msgspec reads it, else
    `MISSING`: a text msgspec refuses."""
    try:
        return _DECODE(raw)
    except _REFUSED:
        return MISSING


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
