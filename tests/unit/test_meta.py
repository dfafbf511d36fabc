"""Record metadata in user code (`processor.Meta`): at a source stage, through shuffles, in
``process``'s state handle, with windows; a source's key formats; and that a pipeline using
none carries none."""

from __future__ import annotations

import json
from typing import Any

import pytest

from processor import Meta, Pipeline, PipelineError
from processor.engine.chain import StageChain
from processor.engine.meta import from_wire, to_wire
from processor.models.records import decode_shuffle
from processor.plan.stages import Plan, plan
from processor.worker import source_meta
from tests.unit.test_chain import DictBackend

HEADERS: list[tuple[str, bytes | None]] = [
    ("source", b"web"),
    ("bin", bytes(range(256))),
    ("null", None),
]


def _metas(n: int, topic: str = "in", partition: int = 3) -> list[Meta]:
    return [
        Meta(f"k{i}", 1000 + i, list(HEADERS) if i % 2 == 0 else [], topic, partition, 70 + i)
        for i in range(n)
    ]


def _chain(compiled: Plan, index: int) -> StageChain:
    shuffles = {n.name: 2 for s in compiled.stages for n in s.shuffles}
    return StageChain(compiled, compiled.stages[index], 0, DictBackend(), shuffles)


def _shuffled(chain: StageChain, name: str) -> list[list[Any]]:
    """Every item the chain wrote into shuffle ``name``, decoded as the next stage reads it."""
    items: list[list[Any]] = []
    for _, value in chain.shuffles[name].take(0):
        _, body = decode_shuffle(value)
        assert isinstance(body, list)
        items.extend(body)
    return items


def _fields(m: Meta) -> tuple[Any, ...]:
    return (m.key, m.timestamp, m.headers, m.topic, m.partition, m.offset)


def _json_fields(m: Meta) -> list[Any]:
    """`_fields` as JSON can carry them (the headers' bytes as Latin-1 text)."""
    return [*_fields(m)[:2], to_wire(m.headers), *_fields(m)[3:]]


def test_a_source_stage_s_functions_see_every_field() -> None:
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def look(op: str) -> Any:
        def fn(value: str, meta: Meta) -> Any:
            seen.append((op, _fields(meta)))
            return [value] if op == "flat_map" else value

        return fn

    p = Pipeline()
    s = p.source("in", key="text")
    s.map(look("map"), meta=True).filter(look("filter"), meta=True).flat_map(
        look("flat_map"), meta=True
    ).sink("out")
    compiled = plan(p)
    chain = _chain(compiled, 0)
    metas = _metas(2)
    chain.values(["a", "b"], metas=metas)
    for i in range(2):
        want = (f"k{i}", 1000 + i, HEADERS if i == 0 else [], "in", 3, 70 + i)
        assert [f for op, f in seen if f[0] == f"k{i}"] == [want] * 3
    assert [op for op, _ in seen] == ["map", "map", "filter", "filter", "flat_map", "flat_map"]
    assert chain.take_sinks()["out"] == [(None, b'"a"'), (None, b'"b"')]


def test_map_filter_flat_map_with_meta_transform_values_and_keep_meta() -> None:
    p = Pipeline()
    s = p.source("in")
    (
        s.map(lambda v, m: f"{v}@{m.offset}", meta=True)
        .filter(lambda v, m: m.partition == 3 and m.offset != 71, meta=True)
        .flat_map(lambda v, m: [v, m.topic], meta=True)
        .map(lambda v, m: [v, m.timestamp], meta=True)
        .sink("out")
    )
    chain = _chain(plan(p), 0)
    chain.values(["a", "b", "c"], metas=_metas(3))
    assert [json.loads(v) for _, v in chain.take_sinks()["out"]] == [
        ["a@70", 1000],
        ["in", 1000],
        ["c@72", 1002],
        ["in", 1002],
    ]


def test_the_timestamp_is_the_source_s_timestamp_function_else_kafka_s() -> None:
    p = Pipeline()
    p.source("in", value="json", timestamp=lambda v: v["ts"]).map(
        lambda v, m: m.timestamp, meta=True
    ).sink("out")
    chain = _chain(plan(p), 0)
    chain.values([{"ts": 5}, {"ts": "x"}, {"ts": 7.9}], metas=_metas(3))
    assert [v for _, v in chain.take_sinks()["out"]] == [b"5", b"7"]
    assert [d.origin for d in chain.take_dead()] == [1]  # the bad timestamp, as it came

    p = Pipeline()
    p.source("in").map(lambda v, m: m.timestamp, meta=True).sink("out")
    chain = _chain(plan(p), 0)
    chain.values(["a"], metas=_metas(1))
    assert chain.take_sinks()["out"] == [(None, b"1000")]


def test_a_failing_function_with_meta_makes_only_its_record_dead() -> None:
    p = Pipeline()
    p.source("in").map(lambda v, m: 1 // ((m.offset or 0) - 71), meta=True).sink("out")
    chain = _chain(plan(p), 0)
    chain.values(["a", "b", "c"], metas=_metas(3))
    assert chain.take_sinks()["out"] == [(None, b"-1"), (None, b"1")]
    (dead,) = chain.take_dead()
    assert (dead.origin, dead.operator) == (1, "in.map")
    assert "ZeroDivisionError" in dead.error


def test_after_a_shuffle_meta_has_the_new_key_time_and_headers_not_the_position() -> None:
    p = Pipeline()
    (
        p.source("in")
        .key_by(lambda v, m: m.key.upper(), meta=True)
        .map(lambda v, m: _json_fields(m), meta=True)
        .sink("out")
    )
    compiled = plan(p)
    up = _chain(compiled, 0)
    up.values(["a", "b"], metas=_metas(2))
    up.flush()
    body = _shuffled(up, compiled.stages[1].name)
    # [key, value, event time, headers]: the headers' bytes as Latin-1 text in the JSON.
    assert sorted(body) == [
        ["K0", "a", 1000, [[n, None if v is None else v.decode("latin-1")] for n, v in HEADERS]],
        ["K1", "b", 1001, []],
    ]
    down = _chain(compiled, 1)
    down.shuffled(body)
    got = {k: json.loads(v) for k, v in down.take_sinks()["out"]}
    assert got == {
        b"K0": ["K0", 1000, json.loads(json.dumps(to_wire(HEADERS))), None, None, None],
        b"K1": ["K1", 1001, [], None, None, None],
    }


def test_headers_cross_a_shuffle_byte_for_byte() -> None:
    seen: list[Meta] = []

    def keep(value: str, meta: Meta) -> bool:
        seen.append(meta)
        return True

    p = Pipeline()
    p.source("in").key_by(lambda v: v).filter(keep, meta=True).sink("out")
    compiled = plan(p)
    up = _chain(compiled, 0)
    up.values(["a", "b"], metas=_metas(2))
    down = _chain(compiled, 1)
    for _, value in up.shuffles[compiled.stages[1].name].take(0):
        _, body = decode_shuffle(value)
        down.shuffled(body)
    by_key = {m.key: m for m in seen}
    assert by_key["a"].headers == HEADERS
    assert by_key["b"].headers == []
    assert from_wire(json.loads(json.dumps(to_wire(HEADERS)))) == HEADERS


def test_a_keyed_stream_s_meta_key_is_the_stream_s_key_also_when_not_text() -> None:
    p = Pipeline()
    p.source("in").key_by(lambda v: len(v)).map(lambda v, m: [m.key, v], meta=True).sink("out")
    compiled = plan(p)
    up = _chain(compiled, 0)
    up.values(["ab", "c"], metas=_metas(2))
    down = _chain(compiled, 1)
    down.shuffled(_shuffled(up, compiled.stages[1].name))
    assert sorted(json.loads(v) for _, v in down.take_sinks()["out"]) == [[1, "c"], [2, "ab"]]


def test_a_key_by_with_meta_before_a_count_still_combines_and_ships_no_meta() -> None:
    p = Pipeline()
    p.source("in", key="text").key_by(lambda v, m: m.key, meta=True).count().sink("out")
    compiled = plan(p)
    head = compiled.stages[1].head
    assert (head.meta_in, head.meta, compiled.stages[1].pair_widths) == (True, False, (2,))
    up = _chain(compiled, 0)
    up.values(["a", "b", "c"], metas=[Meta("x"), Meta("y"), Meta("x")])
    bodies = [decode_shuffle(v)[1] for _, v in up.shuffles[head.name].take(0)]
    assert bodies == [{"x": 2, "y": 1}]


def test_process_state_headers_are_the_record_s_also_after_a_shuffle() -> None:
    def track(value: str, state: Any) -> list[Any]:
        return [[value, to_wire(state.headers)]]

    p = Pipeline()
    p.source("in").key_by(lambda v: "k").process(track).sink("out")
    compiled = plan(p)
    up = _chain(compiled, 0)
    up.values(["a", "b"], metas=[*_metas(2)[:1], Meta(headers=[("h", b"2")])])
    down = _chain(compiled, 1)
    down.shuffled(_shuffled(up, compiled.stages[1].name))
    got = sorted(json.loads(v) for _, v in down.take_sinks()["out"])
    assert got == [["a", json.loads(json.dumps(to_wire(HEADERS)))], ["b", [["h", "2"]]]]


def test_after_an_aggregation_meta_has_the_key_alone() -> None:
    p = Pipeline()
    p.source("in").key_by(lambda v: v).count().map(lambda n, m: _json_fields(m), meta=True).sink(
        "o"
    )
    compiled = plan(p)
    down = _chain(compiled, 1)
    down.shuffled({"a": 2})
    down.flush()
    assert down.take_sinks()["o"] == [(b"a", b'["a",null,[],null,null,null]')]


def test_windows_in_a_pipeline_with_meta_use_the_event_time() -> None:
    p = Pipeline()
    (
        p.source("in", value="json", timestamp=lambda v: v["t"])
        .map(lambda v, m: {**v, "h": (dict(m.headers).get("source") or b"").decode()}, meta=True)
        .key_by(lambda v, m: v["h"], meta=True)
        .map(lambda v, m: [v["t"], m.timestamp, m.key], meta=True)
        .window(size_ms=10)
        .count()
        .map(lambda n, m: [n, m.key, m.timestamp], meta=True)
        .sink("out")
    )
    compiled = plan(p)
    up = _chain(compiled, 0)
    values = [{"t": 1}, {"t": 3}, {"t": 12}]
    newest = up.values(values, metas=[Meta(headers=[("source", b"web")]) for _ in values])
    assert newest == 12
    body = _shuffled(up, compiled.stages[1].name)
    assert sorted((b[2], b[3]) for b in body) == [(1, [["source", "web"]])] * 1 + [
        (3, [["source", "web"]]),
        (12, [["source", "web"]]),
    ]
    down = _chain(compiled, 1)
    down.shuffled(body)
    down.advance(100)
    down.flush()
    got = [(k, json.loads(v)) for k, v in down.take_sinks()["out"]]
    assert got == [(b"web@0", [2, "web@0", 9]), (b"web@10", [1, "web@10", 19])]


def test_a_source_key_alone_decodes_keys_and_strips_the_meta_for_what_needs_none() -> None:
    p = Pipeline()
    p.source("in", key="json").map(str.upper).sink("out")
    compiled = plan(p)
    assert compiled.stages[0].head.meta
    chain = _chain(compiled, 0)
    chain.values(["a"], metas=[Meta({"id": 1})])
    assert chain.take_sinks()["out"] == [(None, b'"A"')]


def test_a_pipeline_without_metadata_carries_none() -> None:
    p = Pipeline()
    lines = p.source("in")
    lines.flat_map(str.split).key_by(str).count().sink("counts")
    lines.key_by(len).window(size_ms=5).count().sink("w")
    lines.key_by(len).reduce(max).map(str).sink("r")
    assert not any(n.meta or n.meta_in for n in p.nodes)
    assert all(s.pair_widths in ((2,), (3,)) for s in plan(p).stages)


def test_meta_must_be_a_bool_and_key_a_format() -> None:
    p = Pipeline()
    with pytest.raises(PipelineError, match="meta="):
        p.source("in").map(str, meta=1)  # type: ignore[call-overload]
    with pytest.raises(PipelineError, match="key="):
        p.source("in2", key="avro")


class _Msg:
    def __init__(self, value: bytes, key: bytes | None, offset: int, headers: Any = None):
        self._value, self._key, self._offset, self._headers = value, key, offset, headers

    def value(self) -> bytes:
        return self._value  # never None here

    def key(self) -> bytes | None:
        return self._key

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 500 + self._offset)

    def headers(self) -> Any:
        return self._headers

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return self._offset


class _Upper:
    @staticmethod
    def loads(raw: bytes) -> str:
        if raw == b"bad":
            raise ValueError("bad key")
        return raw.decode().upper()


@pytest.mark.parametrize(
    ("fmt", "good", "want", "bad"),
    [
        ("text", b"k\xc3\xa9", "ké", b"\xff"),
        ("json", b'{"id":1}', {"id": 1}, b"{"),
        ("bytes", b"\xff", b"\xff", None),
        (_Upper(), b"ab", "AB", b"bad"),
        (None, b"\xff", b"\xff", None),
    ],
)
def test_a_source_key_decodes_in_its_format_and_an_undecodable_one_is_refused(
    fmt: Any, good: bytes, want: Any, bad: bytes | None
) -> None:
    p = Pipeline()
    p.source("in", key=fmt).map(lambda v, m: v, meta=True).sink("out")
    head = plan(p).stages[0].source
    assert head is not None
    msgs: list[Any] = [
        _Msg(b"v0", good, 0, [("h", b"x")]),
        _Msg(b"v1", None, 1),
        _Msg(b"v2", bad, 2),
        _Msg(b"\xff", good, 3),
    ]
    read = source_meta.read(msgs, head)
    assert [_fields(m) for m in read.metas[:2]] == [
        (want, 500, [("h", b"x")], "in", 2, 0),
        (None, 501, [], "in", 2, 1),
    ]
    refused = [(m.offset(), str(e)) for m, e in read.refused]
    if bad is None:
        assert [m.offset() for m in read.kept] == [0, 1, 2]
        assert [o for o, _ in refused] == [3]
    else:
        assert [m.offset() for m in read.kept] == [0, 1]
        assert [o for o, _ in refused] == [2, 3]
        assert refused[0][1].startswith("key ")
    assert read.values == [(m.value() or b"").decode() for m in read.kept]


@pytest.mark.parametrize("fmt", ["text", "json", "bytes"])
def test_a_batch_of_good_records_reads_in_one_pass_like_one_by_one(fmt: str) -> None:
    p = Pipeline()
    p.source("in", key="json", value=fmt).map(lambda v, m: v, meta=True).sink("out")  # type: ignore[call-overload]
    head = plan(p).stages[0].source
    assert head is not None
    msgs: list[Any] = [_Msg(b'{"v":%d}' % i, b"[%d]" % i, i, [("h", b"%d" % i)]) for i in range(3)]
    msgs.insert(1, _Msg(b"", b"1", 9))  # empty: not a record for the pipeline
    fast = source_meta._read_batch([m for m in msgs if m.value()], head)
    assert fast is not None
    bad: Any = _Msg(b'{"v":3}', b"{", 3)
    slow = source_meta.read([*msgs, bad], head)  # a bad key: one by one
    assert slow.refused[0][0].offset() == 3
    assert (fast.values, fast.metas, fast.kept) == (slow.values, slow.metas, slow.kept)
    assert [m.key for m in fast.metas] == [[0], [1], [2]]


def test_a_join_of_keys_by_meta_pairs_by_event_time_and_gives_meta_after() -> None:
    p = Pipeline()
    left = p.source("l", key="text").key_by(lambda v, m: m.key, meta=True)
    right = p.source("r", key="text").key_by(lambda v, m: m.key, meta=True)
    left.join(right, within_ms=5).map(lambda lr, m: [*lr, m.key, m.timestamp], meta=True).sink(
        "out"
    )
    compiled = plan(p)
    join = compiled.stages[2]
    assert join.is_join and join.pair_widths == (3,)  # the join takes no metadata
    shuffles = {n.name: 1 for s in compiled.stages for n in s.shuffles}
    down = StageChain(compiled, join, 0, DictBackend(), shuffles)
    for side, (topic, metas) in enumerate(
        [("l", [Meta("a", 100), Meta("b", 100)]), ("r", [Meta("a", 103), Meta("b", 200)])]
    ):
        stage = compiled.stages[side]
        up = StageChain(compiled, stage, 0, DictBackend(), shuffles)
        newest = up.values([f"{topic}{m.key}" for m in metas], metas=metas)
        assert newest == max(m.timestamp or 0 for m in metas)  # for the source's watermark
        for _, value in up.shuffles[stage.shuffles[0].name].take(0):
            _, body = decode_shuffle(value)
            down.shuffled(body, side=side)
    assert [(k, json.loads(v)) for k, v in down.take_sinks()["out"]] == [
        (b"a", ["la", "ra", "a", 103])
    ]


def test_only_a_process_that_reads_headers_makes_its_records_carry_metadata() -> None:
    """A process that never reads ``state.headers`` costs its pipeline nothing (no metadata
    from the source on); one that reads them elsewhere (a helper) gets a dead record naming
    the fix, never silent empty headers."""

    def count_seen(value: Any, state: Any) -> list[Any]:
        state.set(state.get(0) + 1)
        return [state.get()]

    def via_helper(value: Any, state: Any) -> list[Any]:
        return [_source_of(state)]

    def _source_of(state: Any) -> Any:
        return dict(state.headers).get("source")

    for fn, carries in ((count_seen, False), (via_helper, False), (_reads, True)):
        p = Pipeline()
        p.source("in", value="text").key_by(lambda v: v).process(fn).sink("out")
        compiled = plan(p)
        assert all(n.meta is carries for n in p.nodes if n.kind in ("source", "key_by")), fn
    p = Pipeline()
    p.source("in", value="text").key_by(lambda v: v).process(via_helper).sink("out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stage("in.key_by"), 0, DictBackend(), {})
    chain.shuffled([["a", "a"]])
    (dead,) = chain.take_dead()
    assert "give process(fn, headers=True)" in dead.error
    # Said explicitly (issue #43: the rule read from the code is not one a user sees).
    for fn, given in ((via_helper, True), (_reads, False)):
        p = Pipeline()
        p.source("in", value="text").key_by(lambda v: v).process(fn, headers=given).sink("o")
        plan(p)
        assert all(n.meta is given for n in p.nodes if n.kind in ("source", "key_by")), fn
    p = Pipeline()
    p.source("in", value="text").key_by(lambda v: v).process(via_helper, headers=True).sink("o")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stage("in.key_by"), 0, DictBackend(), {})
    chain.shuffled([["a", "a"]])
    assert chain.take_dead() == []
    windowed = Pipeline().source("in").key_by(lambda v: v).window(size_ms=10)
    with pytest.raises(PipelineError, match=r"headers=True\) on windows"):
        windowed.process(_reads, headers=True)


def _reads(value: Any, state: Any) -> list[Any]:
    return [dict(state.headers).get("source")]
