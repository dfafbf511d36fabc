"""`processor.models.fastjson` against the standard library it stands for (issue #44): on
many values, generated with a fixed seed, the new encode raises exactly when the old one did
(the same exception type) and otherwise decodes, with either decoder, to the value of the
old round trip, of the same types; forged bytes decode as ``json.loads`` decodes them, or are
refused with the same exception."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import random
import struct
import sys
import uuid
from collections import namedtuple
from typing import Any

import orjson
import pytest

from processor.models import fastjson
from processor.models.limits import MAX_JSON_DEPTH, json_problem, json_problems, loads_deep
from processor.models.records import decode_shuffle, encode_shuffle
from processor.serde.codec import RecordError, decode, sink_value, sink_values

SEED = 44


def old_dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def old_loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        return loads_deep(raw)


def outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except (TypeError, ValueError, RecursionError) as exc:
        return "raised", type(exc)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down; NaN equals NaN, -0.0 is not 0.0."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if type(x) is float:
            if not (x == y and math.copysign(1, x) == math.copysign(1, y)) and not (
                x != x and y != y
            ):
                return False
        elif type(x) is list:
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(x) is dict:
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


class Plain(enum.Enum):
    A = 1
    B = "b"


class Number(enum.IntEnum):
    ONE = 1


class Text(enum.StrEnum):
    X = "x"


class Odd(int, enum.Enum):
    """A mixed enum whose value is not its int: the standard library writes the int."""

    A = (1, "one")

    def __new__(cls, number: int, label: str) -> Odd:
        member = int.__new__(cls, number)
        member._value_ = label
        return member


class Str(str):
    pass


class Int(int):
    pass


class Float(float):
    pass


class Dict(dict[Any, Any]):
    pass


class List(list[Any]):
    pass


Pair = namedtuple("Pair", "a b")


class Holder:
    pass


@dataclasses.dataclass
class Point:
    x: int


TEXTS = ["", "a", "\x00", "\ud800", "a\udfffb", "\ud83d\ude00", "😀", "é", "\u2028", '"\\', "\x1f"]
INTS = [0, 1, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30]
FLOATS = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1e308, 1e16, math.nan, math.inf, -math.inf]
EXOTIC: list[Any] = [
    uuid.UUID(int=7),
    Plain.A,
    Plain.B,
    Number.ONE,
    Text.X,
    Odd.A,
    Point(1),
    datetime.datetime(2026, 12, 5, 22, 0),
    datetime.date(2026, 12, 5),
    datetime.time(22, 0),
    b"bytes",
    bytearray(b"x"),
    {1, 2},
    frozenset(),
    decimal.Decimal("1.5"),
    Str("s"),
    Int(3),
    Float(2.5),
    Dict(a=1),
    List([1]),
    Pair(1, 2),
    orjson.Fragment(b"[1]"),
    10**5000,  # beyond int's digit limit: ValueError
    object(),
]


def scalar(rng: random.Random) -> Any:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(TEXTS) + "".join(chr(rng.randrange(0x30000)) for _ in range(3))
    if kind == 1:
        return rng.choice(INTS) * rng.choice([1, -1])
    if kind == 2:
        return rng.randrange(-1000, 1000)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice(FLOATS)
    if kind == 5:
        return struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    if kind == 6:
        return rng.choice(EXOTIC)
    return rng.choice(["word", "w", 1, 0.25])


def value(rng: random.Random, depth: int = 0) -> Any:
    if depth > 4 or rng.random() < 0.4:
        return scalar(rng)
    n = rng.randrange(5)
    kind = rng.randrange(5)
    if kind == 0:
        return [value(rng, depth + 1) for _ in range(n)]
    if kind == 1:
        return tuple(value(rng, depth + 1) for _ in range(n))
    if kind == 2:  # keys: mostly text, sometimes what the standard library converts or refuses
        keys: list[Any] = [rng.choice(["k", "é", "\ud800", "", "a\x00"]) + str(i) for i in range(n)]
        if rng.random() < 0.2:
            keys.append(rng.choice([1, 2.5, True, None, Str("s"), (1,), math.nan, 2**70]))
        return {k: value(rng, depth + 1) for k in keys}
    if kind == 3:  # a shuffle body of pairs
        return [(f"key{i}", value(rng, depth + 1)) for i in range(n)]
    return {f"key{i}": value(rng, depth + 1) for i in range(n)}  # a combined body


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    v = leaf
    for _ in range(depth - 1):
        v = [v] if kind == "list" else {"k": v}
    return v


def special_values() -> list[Any]:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    shared = [1, 2]
    holder = Holder()  # instance dicts: their own table layout
    holder.__dict__.update(a=math.nan, b=uuid.UUID(int=3), c=[1, Plain.A])
    return [
        vars(holder),
        {"h": vars(holder)},
        [("k", vars(Holder()))],
        *[nested(d) for d in (1, 2, 253, 254, 255, 256, 257, 300, 900)],
        *[nested(d, kind="dict") for d in (254, 255, 256, 500)],
        nested(255, math.nan),
        nested(300, uuid.UUID(int=1)),
        cyclic,
        [shared, shared, (shared,)],
        [("w", 1)] * 50,
        [("w", 1.5)] * 20 + [("x", math.inf)],
        [("w", {"a": 1.0e308, "b": 1.0e308})] * 3,  # their sum overflows: the slow path
        [("k", {"bid": {"price": 1, "url": "u"}, "person": None}, 17, [["h", "v"]])] * 5,
        {"k": [1, 2, [3, (4, {"x": Plain.A})]]},
        {"k": [1, 2, [3, (4, {"x": math.nan})]]},
        {"k": [1, 2, [3, (4, {"x": 2**64})]]},
        {1: 2, "a": 3},
        {"\ud800": 1},
        [],
        {},
        (),
    ]


def check_encode(v: Any) -> None:
    old, new = outcome(old_dumps, v), outcome(fastjson.dumps, v)
    assert old[0] == new[0], (ascii(v)[:200], old, new)
    if old[0] == "raised":
        assert old[1] is new[1], (ascii(v)[:200], old, new)
        return
    expected = old_loads(old[1])
    for reader in (old_loads, fastjson.loads):
        assert same(reader(new[1]), expected), (ascii(v)[:200], new[1][:200])


def test_encode_raises_exactly_when_the_standard_library_did_and_round_trips_the_same() -> None:
    rng = random.Random(SEED)
    for v in [*special_values(), *EXOTIC, *TEXTS, *INTS, *FLOATS]:
        check_encode(v)
    for _ in range(4000):
        check_encode(value(rng))


def sink_outcome(v: Any) -> tuple[str, Any]:
    try:
        return "ok", sink_value(v)
    except RecordError as exc:
        return "raised", exc


def test_a_batch_encodes_as_its_values_one_by_one() -> None:
    """`fastjson.dumps_each` and `codec.sink_values` (a sink's batch): the bytes `dumps`
    and `sink_value` give each value, or (one value having none) no answer and the first
    value's `RecordError`; one exotic value in a batch sends the whole batch the slow way."""
    rng = random.Random(SEED)
    values = [*special_values(), *EXOTIC, *TEXTS, *INTS, *FLOATS]
    values += [value(rng) for _ in range(4000)]
    batches = [values[i : i + size] for size in (1, 7, 50) for i in range(0, len(values), size)]
    batches += [[1, 2, 3], [], [b"x"], [1, {"a": 2**70}], [True, 1]]
    answered = 0
    for batch in batches:
        each = [outcome(fastjson.dumps, v) for v in batch]
        fast = fastjson.dumps_each(batch)
        if fast is not None:
            answered += 1
            assert [("ok", raw) for raw in fast] == each, ascii(batch)[:200]
        sinks = [sink_outcome(v) for v in batch]
        failed = [out for out in sinks if out[0] == "raised"]
        if failed:
            with pytest.raises(RecordError) as caught:
                sink_values(batch)
            assert str(caught.value) == str(failed[0][1]), ascii(batch)[:200]
        else:
            assert [("ok", raw) for raw in sink_values(batch)] == sinks, ascii(batch)[:200]
    assert answered > len(batches) // 4, answered  # the exotic values are many


def test_orjson_takes_plain_values_only() -> None:
    """The guard itself: what orjson would encode differently never reaches it."""
    for v in [math.nan, [1, -math.inf], uuid.UUID(int=1), [Plain.A], {"a": (Odd.A,)}, Str("s")]:
        assert not fastjson._plain(v)
    assert not fastjson._plain([orjson.Fragment(b"1")])
    assert fastjson._plain([("w", 1), ("x", 2)])
    assert fastjson._plain({"k": [1, 2.5, None, True, {"a": "b"}]})
    cyclic: list[Any] = []
    cyclic.append([cyclic, cyclic])
    assert not fastjson._plain(cyclic)  # at the bound on containers looked into
    holder = Holder()
    holder.__dict__.update(a=1, b=math.inf)
    assert not fastjson._plain([("k", vars(holder))])


FORGED = [
    b"NaN",
    b"[Infinity,-Infinity,NaN]",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"123456789012345678901234",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b'{"a":1,"a":2}',
    b'{"a":1,"b":2,"a":3}',
    b"1" * 4300,
    b"-" + b"1" * 4301,
    b"1" * 400 + b".0",
    b"1e-400",
    b"2.4703282292062328e-324",
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\\ud83d\\ude00"',
    b'"\xed\xa0\x80"',
    b'"\xc0\xaf"',
    b'"\xff"',
    b'"\xef\xbf\xbf"',
    b"\xef\xbb\xbf[1]",
    '["utf-16"]'.encode("utf-16"),
    '["utf-16-le"]'.encode("utf-16-le"),
    '["utf-32"]'.encode("utf-32"),
    b"1\x00",
    b'"\x01"',
    b'"\x7f"',
    b"[1,]",
    b"01",
    b"1.",
    b".5",
    b"+1",
    b"-0",
    b"-0.0",
    b"'a'",
    b"[1] x",
    b"",
    b" ",
    b"\x0c[1]",
    b"\t[1]\r\n",
    b"[1e5, 1E5, 0.1000000000000000055511151231257827]",
    b"9007199254740993.0",
    b"true",
    b"True",
    b"nul",
    b'"\\x"',
    b'"\\/"',
]


def deep_inputs() -> list[bytes]:
    out = []
    for d in (900, 959, 960, 961, 962, 990, 992, 993, 1000, 1023, 1024, 1025, 1100, 3000):
        out.append(b"[" * d + b"]" * d)
        out.append(b'{"k":' * (d - 1) + b"1" + b"}" * (d - 1))
    # Long and deep, with text that closed the brackets orjson was once read inside of.
    pad = b"[" * 961 + b"]" * 961
    for text in (b"1],[2", b"1]]", b"[1],[2]", b"1]", b"", b" ", b"1,2", b"]" * 64 + b"[" * 64):
        out.append(pad[:961] + text + pad[961:])
        out.append(b"[" + pad + b"," + text + b"]")
        out.append(text + b"," + pad)
    out.append(b"[" + b"[1]," * 1000 + b"2]")  # many brackets, shallow
    # Shallow, long, many brackets.
    out.append(b"[1]," * 1000 + b"[1]")
    out.append(b"[" + b"[1]," * 1000 + b"1],[2]")
    out.append(b"[1]," * 1000)
    return out


def check_decode(raw: bytes) -> None:
    old, new = outcome(old_loads, raw), outcome(fastjson.loads, raw)
    assert old[0] == new[0], (raw[:80], old, new)
    if old[0] == "raised":
        assert old[1] is new[1], (raw[:80], old, new)
    else:
        assert same(old[1], new[1]), raw[:80]


def test_msgspec_reads_what_orjson_misreads_and_refuses_what_the_stdlib_reads_otherwise() -> None:
    """Why the decoder is msgspec: an int beyond 64 bits is exact (orjson's is a float); and
    what it refuses the standard library reads (or refuses) as before."""
    assert orjson.loads(b"18446744073709551616") == 2.0**64
    assert fastjson.try_loads(b"18446744073709551616") == 2**64
    for raw in (b"NaN", b"1e400", b"1" * 4301, b'"\\ud800"', b"\xef\xbb\xbf1", b"[" * 5000):
        assert fastjson.try_loads(raw) is fastjson.MISSING, raw[:20]
        check_decode(raw)


def test_a_deep_value_decodes_as_before_on_a_deep_stack() -> None:
    """msgspec's depth is the interpreter's recursion limit less the stack in use, as
    ``json.loads``' is: called with little room left, both refuse or `loads_deep` reads."""

    def at_depth(n: int, raw: bytes) -> None:
        if n:
            at_depth(n - 1, raw)
        else:
            check_decode(raw)

    for room in (100, 500, 900):
        for d in (50, 200, 600, 950):
            at_depth(sys.getrecursionlimit() - room, b"[" * d + b"]" * d)


def test_forged_bytes_decode_as_json_loads_decodes_them_or_are_refused_the_same() -> None:
    for raw in [*FORGED, *deep_inputs()]:
        check_decode(raw)


def test_mutated_encodings_decode_the_same() -> None:
    rng = random.Random(SEED)
    for _ in range(2500):
        try:
            raw = old_dumps(value(rng))
        except (TypeError, ValueError, RecursionError):
            continue
        check_decode(raw)
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(b) + 1)
            op = rng.randrange(3)
            if op == 0 and i < len(b):
                b[i] = rng.choice(b'[]{},:"\\0123456789eE.-+ntfu \x00\x80\xed\xff')
            elif op == 1:
                b[i:i] = rng.choice([b"[", b"]", b",", b"\\u", b"\\ud800", b"0" * 19, b"e999"])
            elif i < len(b):
                del b[i]
        check_decode(bytes(b))


def test_float_literals_parse_as_float_does() -> None:
    rng = random.Random(SEED)
    for _ in range(20000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 18)))
        digits = digits.lstrip("0") or "0"
        cut = rng.randint(1, len(digits))
        text = digits[:cut] + ("." + digits[cut:] if digits[cut:] else "")
        if rng.random() < 0.7:
            text += f"e{rng.randint(-340, 320)}"
        bits = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        for t in (("-" if rng.random() < 0.5 else "") + text, repr(bits)):
            check_decode(t.encode())


def test_the_shuffle_codec_round_trips_as_before() -> None:
    rng = random.Random(SEED)
    for _ in range(500):
        body = [(f"key{i}", value(rng)) for i in range(rng.randrange(1, 5))]
        try:
            old = old_dumps(body)
        except (TypeError, ValueError, RecursionError) as exc:
            with pytest.raises(type(exc)):
                encode_shuffle(3, body)
            continue
        channel, decoded = decode_shuffle(encode_shuffle(3, body))
        assert channel == 3
        assert same(decoded, json.loads(old))


def old_source_decode(raw: bytes) -> Any:
    """`processor.serde.codec.decode`'s JSON before orjson (issue #44)."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8: {exc.reason} at byte {exc.start}", "non_utf8") from None
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


def source_outcome(fn: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(raw)
    except RecordError as exc:
        return "dead", (exc.reason, str(exc))


def source_inputs() -> list[bytes]:
    rng = random.Random(SEED)
    raws = [*FORGED, *deep_inputs()]
    for d in (150, 200, 201, 202, 300, 960):
        raws.append(b"[" * d + b"]" * d)
        raws.append(b'{"k":' * (d - 1) + b'"\\ud800"' + b"}" * (d - 1))
    for _ in range(1500):
        try:
            raws.append(old_dumps(value(rng)))
        except (TypeError, ValueError, RecursionError):
            continue
        b = bytearray(raws[-1])
        i = rng.randrange(len(b) + 1)
        b[i:i] = rng.choice([b"[", b"]", b"\\ud800", b"0" * 19, b"\xef\xbb\xbf", b"\xff"])
        raws.append(bytes(b))
    return raws


def test_a_json_source_decodes_as_before_or_makes_the_same_dead_record() -> None:
    for raw in source_inputs():
        old = source_outcome(old_source_decode, raw)
        new = source_outcome(lambda r: decode("json", r), raw)
        assert old[0] == new[0], (raw[:80], old, new)
        assert same(old[1], new[1]) if old[0] == "ok" else old[1] == new[1], (raw[:80], old, new)


def test_a_json_source_batch_decodes_as_before_or_goes_record_by_record() -> None:
    """The sources' batch path (`SourceTask._decode`, `source_meta._read_batch`): values as
    ``json.loads`` read them, or None (then record by record) exactly when it was None."""

    def batch(loads: Any, raws: list[bytes]) -> list[Any] | None:
        try:
            values = [loads(r) for r in raws]
        except (ValueError, RecursionError):
            return None
        return None if json_problems(raws, values) else values

    raws = source_inputs()
    chunks = [raws[i : i + size] for size in (1, 7, 40) for i in range(0, len(raws), size)]
    plain = [r for r in raws if len(r) < 300 and b"\\" not in r]  # the usual batch
    chunks += [plain[i : i + 40] for i in range(0, len(plain), 40)] + [[]]
    whole = 0
    for chunk in chunks:
        old, new = batch(json.loads, chunk), fastjson.loads_batch(chunk)
        assert (old is None) == (new is None), chunk
        if old is not None:
            whole += 1
            assert same(old, new)
    assert whole > len(chunks) // 4, whole
