"""Poison records (issue #22, hole 1): content no task may fail on. Each one becomes output
or a dead record, at the operator that cannot carry it, and the records around it flow on:
lone surrogates, deep nesting, absurd event times and records larger than Kafka takes."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest

from processor import Pipeline
from processor.api.ops import load_value
from processor.engine.chain import DeadRecord, StageChain
from processor.models import limits
from processor.models.limits import DEFAULT_RECORD_LIMIT as RECORD_LIMIT
from processor.models.records import (
    Watermark,
    decode_shuffle,
    encode_shuffle,
    encode_watermark,
)
from processor.plan.stages import Plan, plan
from processor.serde.codec import RecordError, decode, shown, sink_value
from processor.worker.deadletter import DeadLetters
from tests.unit.test_chain import DictBackend

SURROGATE = "\ud800"


def _nested(depth: int) -> Any:
    value: Any = "core"
    for _ in range(depth):
        value = [value]
    return value


def _source(compiled: Plan, partitions: int = 1, limit: int = RECORD_LIMIT) -> StageChain:
    shuffles = {s.name: partitions for s in compiled.stages if not s.is_source}
    return StageChain(
        compiled, compiled.stages[0], 0, DictBackend(), shuffles, max_record_bytes=limit
    )


def _shipped(chain: StageChain) -> list[Any]:
    """Every item the chain's shuffles hold, as the next stage decodes them."""
    items: list[Any] = []
    for shuffle in chain.shuffles.values():
        for _, value in shuffle.take(chain.channel):
            body = decode_shuffle(value)[1]
            items += list(body.items()) if isinstance(body, dict) else body
    return items


def _dead(chain: StageChain) -> list[tuple[str, str, int | None]]:
    return [(d.operator, d.reason, d.origin) for d in chain.take_dead()]


# -- (a) lone surrogates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"k": "\\ud800"}',
        b'{"k": "a", "v": ["x\\udfff"]}',
        b'{"\\udbff": 1}',
        b'"\\ud800"',
        b'"\\ud83d\\ude00\\ude00"',  # a pair, then a low one alone
        b'"x83d\\ude00"',  # text that looks like the end of a high one
        b'["\\\\", "\\ud800"]',  # an escaped backslash elsewhere
        b'"\\\\\\ud800"',  # an escaped backslash, then a lone one
    ],
)
def test_json_with_a_lone_surrogate_is_dead_at_decoding(raw: bytes) -> None:
    assert json.loads(raw) is not None  # Python's parser takes it
    with pytest.raises(RecordError) as failed:
        decode("json", raw)
    assert failed.value.reason == "invalid_unicode"
    good = b'{"k": "\\ud83d\\ude00"}'
    assert limits.json_problems([good, raw], [json.loads(good), json.loads(raw)])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"k": "\\ud83d\\ude00"}',
        b'{"k": "\\uD83D\\uDE00 \\ud800\\udc00"}',
        b'{"k": "\\\\ud800"}',  # a backslash, then text
        b'{"k": "\\u00e9"}',
        b'{"k": "x"}',
    ],
)
def test_json_with_paired_or_escaped_surrogate_text_decodes(raw: bytes) -> None:
    assert decode("json", raw) == json.loads(raw)
    assert not limits.json_problems([raw], [json.loads(raw)])


def test_the_batch_check_for_lone_surrogates_agrees_with_encoding() -> None:
    """Random strings of escapes and look-alike text: the batch's C-loop check finds a lone
    surrogate exactly when strict UTF-8 cannot encode the decoded value."""
    rng = random.Random(5)
    parts = [b"\\ud83d", b"\\ude00", b"\\uDBFF", b"\\uDC00", b"\\\\", b"x", b"83d", b"\\u00e9"]
    for _ in range(3000):
        raw = b'"' + b"".join(rng.choice(parts) for _ in range(rng.randrange(1, 6))) + b'"'
        value = json.loads(raw)
        try:
            value.encode()
            lone = False
        except UnicodeEncodeError:
            lone = True
        assert limits.json_problems([b"{}", raw], [{}, value]) == lone, raw


@pytest.mark.parametrize("shape", ["count", "aggregate", "uncombined", "timed"])
def test_a_key_with_a_lone_surrogate_is_dead_not_a_failed_flush(shape: str) -> None:
    """A function can make such a key (the source refuses such input): dead at the key_by
    (as many times as records had it), every other key shipped."""
    p = Pipeline()
    source = p.source("n", value="json", timestamp=(lambda v: 1000) if shape == "timed" else None)
    keyed = source.key_by(lambda v: SURROGATE if v % 3 == 0 else str(v))
    if shape == "count":
        keyed.count().sink("out")
    elif shape == "aggregate":
        keyed.aggregate(0, lambda acc, v: acc + v, merge=lambda a, b: a + b).sink("out")
    elif shape == "uncombined":
        keyed.map(lambda v: v).sink("out")
    else:
        keyed.window(size_ms=1000).count().sink("out")
    chain = _source(plan(p), partitions=3)
    chain.values([1, 3, 2, 6, 4, 9])
    chain.flush()
    shipped = _shipped(chain)
    assert sorted(str(item[0]) for item in shipped) == ["1", "2", "4"]
    dead = chain.take_dead()
    copies = 1 if shape == "aggregate" else 3  # a combined partial stands for its records
    assert [(d.operator, d.reason) for d in dead] == [("n.key_by", "invalid_unicode")] * copies
    assert "is not UTF-8" in dead[0].error


def test_a_value_with_a_lone_surrogate_is_dead_at_the_shuffle_and_at_a_sink() -> None:
    """Once only per operator: the old slow path caught the failure and then encoded the
    same body again (UnicodeEncodeError)."""
    p = Pipeline()
    values = p.source("n", value="json").map(lambda v: "x" + SURROGATE if v == 2 else v)
    values.sink("plain")
    values.key_by(lambda v: "k").map(lambda v: v).sink("keyed")
    chain = _source(plan(p))
    chain.values([1, 2, 3])
    assert chain.take_sinks() == {"plain": [(None, b"1"), (None, b"3")]}
    assert [item[1] for item in _shipped(chain)] == [1, 3]
    dead = chain.take_dead()
    assert [(d.operator, d.reason) for d in dead] == [
        ("n.map.sink", "function_error"),
        ("n.map.key_by", "function_error"),
    ]
    assert all("not JSON-encodable" in d.error for d in dead)
    assert sink_value("ok") == b'"ok"'


def test_a_sink_that_fails_mid_batch_writes_each_good_record_once() -> None:
    p = Pipeline()
    p.source("n", value="json").map(lambda v: {v} if v == 3 else v).sink("out")
    chain = _source(plan(p))
    chain.values([1, 2, 3, 4])
    assert chain.take_sinks() == {"out": [(None, b"1"), (None, b"2"), (None, b"4")]}
    assert _dead(chain) == [("n.map.sink", "function_error", None)]


# -- (b) deep nesting --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 5000,
        b"[" * 5000 + b"]" * 5000,
        json.dumps({"k": "a", "d": _nested(limits.MAX_JSON_DEPTH)}).encode(),
    ],
)
def test_json_nested_too_deeply_is_dead_at_decoding(raw: bytes) -> None:
    with pytest.raises(RecordError) as failed:
        decode("json", raw)
    assert failed.value.reason == "too_deep"


def test_json_nested_up_to_the_limit_decodes() -> None:
    raw = json.dumps({"d": _nested(limits.MAX_JSON_DEPTH - 1)}).encode()
    assert decode("json", raw) == json.loads(raw)
    wide = json.dumps([[i] for i in range(5000)]).encode()  # many brackets, shallow
    assert decode("json", wide) == json.loads(wide)


def test_values_a_function_nests_too_deeply_are_dead_wherever_they_must_be_written() -> None:
    p = Pipeline()
    values = p.source("n", value="json").map(lambda v: _nested(5000) if v == 2 else v)
    values.sink("plain")
    values.key_by(lambda v: "k").map(lambda v: v).sink("keyed")
    values.key_by(lambda v: _nested(5000) if v == 3 else "k", name="deep-key").count().sink("c")
    chain = _source(plan(p))
    chain.values([1, 2, 3])
    chain.flush()
    assert chain.take_sinks() == {"plain": [(None, b"1"), (None, b"3")]}
    assert sorted(map(list, _shipped(chain))) == [["k", 1], ["k", 2], ["k", 3]]
    dead = chain.take_dead()
    assert sorted((d.operator, d.reason, d.value) for d in dead) == [
        ("deep-key", "too_deep", b"3"),
        ("n.map.key_by", "too_deep", b"<list nested too deeply to show>"),
        ("n.map.sink", "too_deep", b"<list nested too deeply to show>"),
    ]


def test_a_shuffle_record_too_deep_for_the_reading_stack_still_decodes() -> None:
    """Encoded in a shallow stack, read in a deep one: decoded on a fresh stack."""
    value = encode_shuffle(0, [["k", _nested(900), 5]])

    def deep(frames: int) -> Any:
        return decode_shuffle(value) if frames == 0 else deep(frames - 1)

    assert deep(sys.getrecursionlimit() - 400)[1][0][1] == _nested(900)
    stored = json.dumps(_nested(900)).encode()

    def load(frames: int) -> Any:
        return load_value(stored) if frames == 0 else load(frames - 1)

    assert load(sys.getrecursionlimit() - 400) == _nested(900)


def test_shown_never_raises() -> None:
    class Bad:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shown(_nested(5000)) == "<list nested too deeply to show>"
    assert shown(Bad()) == "<Bad whose repr raised RuntimeError>"
    assert shown("x" * 500, 10) == "'xxxxxxxxx"


# -- (c) event times -------------------------------------------------------------------------


def test_event_times_outside_the_valid_range_are_dead_at_the_timestamp_step() -> None:
    p = Pipeline()
    source = p.source("e", value="json", timestamp=lambda v: v["ts"])
    source.key_by(lambda v: "k").window(size_ms=1000).count().sink("out")
    chain = _source(plan(p))
    limit = limits.EVENT_TIME_LIMIT
    good = [{"ts": 5}, {"ts": limit - 1}, {"ts": 1.5e15}, {"ts": -(limit - 1)}]
    bad = [1e19, -1e19, float("inf"), float("-inf"), float("nan"), limit, -limit, 10**30]
    values = [{"ts": ts} for ts in bad] + good + [{"ts": True}, {"ts": "1"}]
    newest = chain.values(values)
    assert newest == limit - 1
    encode_watermark(Watermark(0, newest))  # packs: what 1e19 could not
    assert _dead(chain) == [("e", "bad_event_time", i) for i in range(len(bad))] + [
        ("e", "function_error", len(values) - 2),
        ("e", "function_error", len(values) - 1),
    ]
    assert sorted(item[2] for item in _shipped(chain)) == sorted(int(v["ts"]) for v in good)  # type: ignore[index]


@pytest.mark.parametrize(
    ("values", "dead"),
    [
        ([{"ts": 3}, {"ts": 1}, {"ts": 2}], []),  # the batch path: ints in range
        ([{"ts": 3.0}, {"ts": 1.5}, {"ts": 2.0}], []),  # floats: one at a time, made ints
        ([{"ts": 3}, {}, {"ts": 2}], [("e", "function_error", 1)]),  # the function raises
        ([{"ts": 3}, {"ts": 1 << 53}, {"ts": 2}], [("e", "bad_event_time", 1)]),
        ([{"ts": 3}, {"ts": True}, {"ts": 2}], [("e", "function_error", 1)]),  # no time
    ],
)
def test_a_batch_of_times_is_stamped_as_a_record_at_a_time_would_be(
    values: list[dict[str, Any]], dead: list[Any]
) -> None:
    p = Pipeline()
    source = p.source("e", value="json", timestamp=lambda v: v["ts"])
    source.key_by(str).window(size_ms=1000).count().sink("o")
    chain = _source(plan(p))
    newest = chain.values(values)
    assert newest == 3 and type(newest) is int
    assert _dead(chain) == dead


def test_kafka_timestamps_in_range() -> None:
    assert limits.in_range([0, -1, limits.EVENT_TIME_LIMIT - 1])
    assert not limits.in_range([0, limits.EVENT_TIME_LIMIT])
    assert not limits.in_range([-limits.EVENT_TIME_LIMIT, 0])


# -- (d) records larger than Kafka takes ---------------------------------------------------


def test_a_sink_record_that_grows_past_the_limit_is_dead_and_names_its_source_value() -> None:
    """200 KB of control characters: 1.2 MB of JSON escapes."""
    p = Pipeline()
    p.source("t").sink("out")
    chain = _source(plan(p))
    grown = "\x01" * 200_000
    assert len(sink_value(grown)) > RECORD_LIMIT
    chain.values(["a", grown, "b"])
    assert chain.take_sinks() == {"out": [(None, b'"a"'), (None, b'"b"')]}
    dead = chain.take_dead()
    assert [(d.operator, d.reason, d.origin) for d in dead] == [("t.sink", "oversized_record", 1)]
    assert "larger than Kafka takes" in dead[0].error


def test_a_keyed_sink_record_counts_its_key() -> None:
    p = Pipeline()
    p.source("t").key_by(lambda v: v[:1] * 600 if v.startswith("x") else v[:1]).map(
        lambda v: v
    ).sink("out")
    compiled = plan(p)
    keyed = StageChain(compiled, compiled.stages[1], 0, DictBackend(), {}, max_record_bytes=1000)
    keyed.shuffled([["x" * 600, "x" * 300], ["y", "y" * 300], ["x" * 600, "x" * 500]])
    assert [len(k or b"") + len(v) for k, v in keyed.take_sinks()["out"]] == [902, 303]
    assert _dead(keyed) == [("t.key_by.map.sink", "oversized_record", None)]


@pytest.mark.parametrize("timed", [False, True])
def test_an_uncombined_shuffle_item_past_the_limit_is_dead_the_rest_shipped(timed: bool) -> None:
    """A single [key, value] larger than a record may be cannot be split."""
    p = Pipeline()
    source = p.source("t", value="json", timestamp=(lambda v: 7) if timed else None)
    source.key_by(lambda v: v["k"]).map(lambda v: v).sink("out")
    chain = _source(plan(p), partitions=2, limit=50_000)
    values = [{"k": "a", "v": "x" * 10_000} for _ in range(20)]
    values.insert(5, {"k": "a", "v": "y" * 60_000})
    chain.values(values)
    chain.flush()
    records = [v for shuffle in chain.shuffles.values() for _, v in shuffle.take(0)]
    assert all(len(v) <= 50_000 for v in records) and len(records) > 1
    shipped = [item for v in records for item in decode_shuffle(v)[1]]
    assert len(shipped) == 20
    dead = chain.take_dead()
    assert [(d.operator, d.reason) for d in dead] == [("t.key_by", "oversized_record")]


def test_a_late_record_past_the_limit_is_dead() -> None:
    p = Pipeline()
    p.source("e", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"]).window(
        size_ms=10
    ).count().sink("out")
    compiled = plan(p)
    chain = StageChain(
        compiled, compiled.stages[1], 0, DictBackend(), {}, late_topic="late", max_record_bytes=1000
    )
    chain.advance(1000)
    chain.shuffled([["a", {"v": "x" * 2000}, 5], ["a", {"v": "x"}, 5]])
    assert len(chain.take_sinks()["late"]) == 1
    assert _dead(chain) == [("e.key_by.window.count", "oversized_record", None)]


def test_integers_past_the_conversion_limit_are_dead_not_fatal() -> None:
    """Python refuses to print ints of over 4,300 digits (ValueError)."""
    p = Pipeline()
    p.source("n", value="json").key_by(lambda v: "k").reduce(lambda a, b: a * b).sink("out")
    compiled = plan(p)
    keyed = StageChain(compiled, compiled.stages[1], 0, DictBackend(), {})
    keyed.shuffled([["k", 10**2000], ["k", 10**2000], ["k", 10**2000]])
    keyed.flush()
    assert keyed.take_sinks() == {}
    assert _dead(keyed) == [("n.key_by.reduce", "function_error", None)]


# -- the DLQ record ----------------------------------------------------------------------------


class _Out:
    """What a task's output got (DeadLetters only produces)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None, dict[str, bytes]]] = []

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        self.records.append((topic, value, key, dict(headers or [])))


class _Msg:
    def __init__(self, value: bytes, key: bytes | None, offset: int) -> None:
        self._value, self._key, self._offset = value, key, offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return self._offset


def _letters(limit: int = RECORD_LIMIT) -> DeadLetters:
    return DeadLetters("job.dlq", "split-0", {"job_name": "j", "task": "t"}, limit)


def _size(record: tuple[str, bytes, bytes | None, dict[str, bytes]]) -> int:
    _, value, key, headers = record
    return len(value) + len(key or b"") + limits.headers_size(list(headers.items()))


def test_a_dead_source_record_keeps_its_bytes_and_key_and_fits_the_dlq() -> None:
    fake = _Out()
    out: Any = fake
    letters = _letters()
    big: Any = _Msg(b"\xff" * 990_000, b"k" * 20_000, 7)
    letters.source_record(out, big, "not UTF-8: x", "non_utf8", "e")
    small: Any = _Msg(b'{"ts": 1e19}', b"key", 8)
    dead = DeadRecord("e", "event time 1e19 ...", b'{"ts":1e19}', "bad_event_time", 0)
    letters.failed(out, [dead], [small].__getitem__)
    (_, value, key, headers), (_, value2, key2, headers2) = fake.records
    assert _size(fake.records[0]) <= RECORD_LIMIT
    assert headers["truncated"] == b"990000" and "truncated.key" not in headers
    assert key == b"k" * 20_000 and value == b"\xff" * len(value) and len(value) > 900_000
    assert headers["offset"] == b"7" and headers["error"] == b"not UTF-8: x"
    assert headers["topic"] == b"in" and headers["partition"] == b"3"
    assert (value2, key2) == (b'{"ts": 1e19}', b"key")
    assert headers2["operator"] == b"e" and headers2["offset"] == b"8"
    assert "truncated" not in headers2


def test_a_dead_record_with_a_huge_key_or_error_still_fits() -> None:
    fake = _Out()
    out: Any = fake
    letters = _letters(limit=10_000)
    msg: Any = _Msg(b"v" * 50, b"k" * 20_000, 1)
    letters.source_record(out, msg, "e" * 50_000, "not_json", "n")
    letters.failed(out, [DeadRecord("op", "\ud800" * 10, b'"x"')])
    assert all(_size(r) <= 10_000 for r in fake.records)
    assert fake.records[0][3]["truncated.key"] == b"20000"
    assert fake.records[1][3]["error"] == b"\\ud800" * 10
