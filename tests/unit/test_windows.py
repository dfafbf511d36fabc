"""Windows and joins in a stage chain, without Kafka: checked against direct computations,
with random batching, watermark steps and restarts from the stored state."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.api.streams import KeyedStream
from processor.engine.chain import StageChain
from processor.models.records import decode_shuffle
from processor.plan.stages import Plan, Stage, plan
from tests.unit.test_chain import DictBackend, restored

LATE = "job.late"


def _keyed_plan(
    shape: Callable[[KeyedStream[Any, Any]], KeyedStream[Any, Any]],
) -> tuple[Plan, Stage]:
    p = Pipeline()
    shape(p.source("in", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])).sink(
        "out"
    )
    compiled = plan(p)
    return compiled, compiled.stages[1]


class Harness:
    """One keyed task's chain over a dict backend; `restart` rebuilds it from the state."""

    def __init__(self, compiled: Plan, stage: Stage) -> None:
        self.compiled, self.stage = compiled, stage
        self.backend = DictBackend()
        self.out: list[tuple[bytes | None, bytes]] = []
        self.late: list[tuple[bytes | None, bytes]] = []
        self.chain = self._chain()

    def _chain(self) -> StageChain:
        return StageChain(self.compiled, self.stage, 0, self.backend, {}, late_topic=LATE)

    def records(self, items: list[tuple[str, Any, int]], side: int = 0) -> None:
        self.chain.shuffled([[k, v, ts] for k, v, ts in items], side=side)

    def advance(self, watermark: int) -> None:
        self.chain.advance(watermark)

    def flush(self) -> None:
        self.chain.flush()
        sinks = self.chain.take_sinks()
        self.late += sinks.pop(LATE, [])
        for records in sinks.values():
            self.out += records

    def restart(self) -> None:
        """What a restore does: the flushed state, the watermark, timers from the state."""
        self.flush()
        self.chain = restored(self.chain, self._chain, self.backend.data)

    def emitted(self) -> Counter[tuple[str, str]]:
        return Counter(((k or b"").decode(), v.decode()) for k, v in self.out)


def _stream(
    seed: int,
    n: int = 400,
    bound: int = 300,
    steps: tuple[int, ...] = (0, 20, 50, 100, 400, 2500),
    edges: float = 0.0,
) -> list[tuple[str, Any, int]]:
    """Records in roughly increasing event time (by one of ``steps`` each), less than
    ``bound`` ms out of order; a share ``edges`` of them exactly 0 or ``bound - 1`` ms."""
    rng = random.Random(seed)
    out = []
    t = 10_000
    for i in range(n):
        t += rng.choice(steps)
        behind = rng.randrange(bound)
        if edges and rng.random() < edges:
            behind = rng.choice([0, bound - 1])
        out.append((rng.choice("abc"), {"i": i, "n": rng.randrange(5)}, t - behind))
    return out


def _drive(h: Harness, items: list[tuple[str, Any, int]], bound: int, seed: int) -> int:
    """Random batches; after each, maybe a watermark (newest - bound), a flush, a restart.
    Returns the final watermark, after which nothing more is open."""
    rng = random.Random(seed)
    newest = -(10**9)
    i = 0
    while i < len(items):
        size = rng.randrange(1, 30)
        batch = items[i : i + size]
        i += size
        h.records(batch)
        newest = max([newest, *(ts for _, _, ts in batch)])
        if rng.random() < 0.5:
            h.advance(max(h.chain.watermark, newest - bound))
        if rng.random() < 0.3:
            h.flush()
        if rng.random() < 0.1:
            h.restart()
    final = newest + 10**6
    h.advance(final)
    h.flush()
    return final


def _tumbling(items: list[tuple[str, Any, int]], size: int, slide: int) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, int]] = Counter()
    for k, _, ts in items:
        for start in range(ts - ts % slide, ts - size, -slide):
            counts[k, start] += 1
    return Counter({(f"{k}@{s}", str(n)): 1 for (k, s), n in counts.items()})


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("size", "slide"), [(1000, 1000), (3000, 1000), (2000, 500)])
def test_tumbling_and_hopping_counts_once_per_window(seed: int, size: int, slide: int) -> None:
    compiled, stage = _keyed_plan(
        lambda s: s.window(size_ms=size, slide_ms=None if slide == size else slide).count()
    )
    h = Harness(compiled, stage)
    items = _stream(seed)
    _drive(h, items, 300, seed)
    assert h.emitted() == _tumbling(items, size, slide)
    assert h.late == [] and not h.backend.data  # every window closed and deleted


def _sessions(items: list[tuple[str, Any, int]], gap: int) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for key in {k for k, _, _ in items}:
        stamps = sorted(ts for k, _, ts in items if k == key)
        start = prev = stamps[0]
        n = 0
        for ts in stamps:
            if ts - prev >= gap:
                out[f"{key}@{start}", str(n)] += 1
                start, n = ts, 0
            prev, n = ts, n + 1
        out[f"{key}@{start}", str(n)] += 1
    return out


@pytest.mark.parametrize("seed", range(10))
def test_session_windows_merge_out_of_order_records(seed: int) -> None:
    compiled, stage = _keyed_plan(lambda s: s.window(gap_ms=1000).count())
    h = Harness(compiled, stage)
    items = _stream(seed)
    _drive(h, items, 300, seed)
    assert h.emitted() == _sessions(items, 1000)


def test_a_record_bridging_two_sessions_merges_them() -> None:
    compiled, stage = _keyed_plan(lambda s: s.window(gap_ms=100).count().map(lambda n: n * 10))
    h = Harness(compiled, stage)
    h.records([("a", {}, 1000), ("a", {}, 1150)])  # two sessions: [1000,1100) [1150,1250)
    h.records([("a", {}, 1090)])  # overlaps both
    h.advance(1249)
    h.flush()
    assert h.out == []
    h.advance(1250)
    h.flush()
    assert h.out == [(b"a@1000", b"30")]


@pytest.mark.parametrize("seed", range(4))
def test_sum_reduce_aggregate_per_window(seed: int) -> None:
    def shape(s: KeyedStream[Any, Any]) -> KeyedStream[Any, Any]:
        w = s.map(lambda v: v["n"]).window(size_ms=2000)
        w.sum(name="s").sink("sums")
        w.reduce(max, name="r").sink("maxes")
        return w.aggregate([], lambda acc, v: [*acc, v], name="a").map(sorted)

    compiled, stage = _keyed_plan(shape)
    h = Harness(compiled, stage)
    items = _stream(seed)
    out: dict[str, Counter[tuple[str, str]]] = {}
    h.flush = _split_flush(h, out)  # type: ignore[method-assign]
    _drive(h, items, 300, seed)
    values: dict[tuple[str, int], list[int]] = {}
    for k, v, ts in items:
        values.setdefault((k, ts - ts % 2000), []).append(v["n"])
    expect = {
        "sums": Counter({(f"{k}@{s}", str(sum(v))): 1 for (k, s), v in values.items()}),
        "maxes": Counter({(f"{k}@{s}", str(max(v))): 1 for (k, s), v in values.items()}),
        "out": Counter(
            {
                (f"{k}@{s}", json.dumps(sorted(v), separators=(",", ":"))): 1
                for (k, s), v in values.items()
            }
        ),
    }
    assert out == expect


def _split_flush(h: Harness, out: dict[str, Counter[tuple[str, str]]]) -> Callable[[], None]:
    def flush() -> None:
        h.chain.flush()
        for topic, records in h.chain.take_sinks().items():
            for k, v in records:
                out.setdefault(topic, Counter())[(k or b"").decode(), v.decode()] += 1

    return flush


def test_late_records_go_to_the_late_topic_and_change_nothing() -> None:
    compiled, stage = _keyed_plan(lambda s: s.window(size_ms=1000, lateness_ms=500).count())
    h = Harness(compiled, stage)
    h.records([("a", {"x": 1}, 1100)])
    h.advance(2400)  # [1000, 2000) stays open for another 500 ms: not late yet
    h.records([("a", {"x": 2}, 1200)])
    h.advance(2500)  # closes it: 2 records
    h.records([("a", {"x": 3}, 1300), ("b", {"x": 4}, 1999), ("b", {"x": 5}, 2000)])
    h.advance(10_000)
    h.flush()
    assert sorted(h.out) == [(b"a@1000", b"2"), (b"b@2000", b"1")]
    assert h.late == [(b"a", b'{"x":3}'), (b"b", b'{"x":4}')]
    assert h.chain.late == {"in.key_by.window.count": 2}


def test_hopping_late_for_some_windows_counts_in_the_open_ones() -> None:
    compiled, stage = _keyed_plan(lambda s: s.window(size_ms=1000, slide_ms=500).count())
    h = Harness(compiled, stage)
    h.advance(1600)  # [500, 1500) closed; [1000, 2000) open
    h.records([("a", {}, 1200)])
    h.advance(5000)
    h.flush()
    assert h.out == [(b"a@1000", b"1")] and h.late == []


def test_process_per_window_state_is_deleted_when_the_window_closes() -> None:
    def dedupe(value: Any, state: Any) -> list[Any]:
        seen = state.get([])
        if value["id"] in seen:
            return []
        state.set([*seen, value["id"]])
        return [value["id"]]

    compiled, stage = _keyed_plan(lambda s: s.window(size_ms=1000).process(dedupe))
    h = Harness(compiled, stage)
    h.records([("a", {"id": 1}, 100), ("a", {"id": 1}, 200), ("a", {"id": 2}, 1100)])
    h.restart()
    h.records([("a", {"id": 1}, 300), ("a", {"id": 1}, 1200)])
    h.flush()
    assert sorted(h.out) == [(b"a@0", b"1"), (b"a@1000", b"1"), (b"a@1000", b"2")]
    assert h.backend.data
    h.advance(2000)
    h.flush()
    assert not h.backend.data


def test_a_window_state_the_store_refuses_is_dead_at_the_epochs_end_naming_its_key() -> None:
    """A windowed ``process``'s ``state.set`` keeps the value in memory: the epoch's end
    stores the key's windows, so a value that is no JSON (a set) is a dead record naming the
    key, whose windows keep their state of the last checkpoint."""

    def keep(value: Any, state: Any) -> list[Any]:
        seen = state.get([])
        state.set(set(seen) if value["id"] == 0 else [*seen, value["id"]])
        return [[sorted(seen), value["id"]]]

    compiled, stage = _keyed_plan(lambda s: s.window(size_ms=1000).process(keep))
    h = Harness(compiled, stage)
    h.records([("a", {"id": 1}, 100)])
    h.restart()
    h.records([("a", {"id": 2}, 200), ("a", {"id": 0}, 300)])
    h.flush()
    dead = h.chain.take_dead()
    h.restart()
    h.records([("a", {"id": 3}, 400)])
    h.flush()
    assert [json.loads(v) for _, v in h.out] == [[[], 1], [[1], 2], [[1, 2], 0], [[1], 3]]
    assert [d.operator for d in dead] == ["in.key_by.window.process"]
    assert "state of key 'a' not stored" in dead[0].error, dead[0].error


def test_quiet_firing_deletes_without_emitting() -> None:
    compiled, stage = _keyed_plan(lambda s: s.window(size_ms=1000).count())
    h = Harness(compiled, stage)
    h.records([("a", {}, 100)])
    h.chain.advance(1000, quiet=True)
    h.flush()
    assert h.out == [] and not h.backend.data


def test_a_failing_function_is_a_dead_record_and_the_window_goes_on() -> None:
    compiled, stage = _keyed_plan(
        lambda s: s.window(size_ms=1000).reduce(lambda a, b: {"n": a["n"] + b["n"]})
    )
    h = Harness(compiled, stage)
    h.records([("a", {"n": 1}, 100), ("a", {"x": 1}, 200), ("a", {"n": 2}, 300)])
    h.advance(1000)
    h.flush()
    assert h.out == [(b"a@0", b'{"n":3}')]
    assert [d.operator for d in h.chain.take_dead()] == ["in.key_by.window.reduce"]


def _join_plan(within: int) -> tuple[Plan, Stage]:
    p = Pipeline()
    left = p.source("l", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    right = p.source("r", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    left.join(right, within_ms=within).map(lambda pair: [pair[0]["i"], pair[1]["i"]]).sink("out")
    compiled = plan(p)
    return compiled, compiled.stages[2]


@pytest.mark.parametrize("seed", range(10))
def test_join_emits_every_pair_within_the_bound_once(seed: int) -> None:
    compiled, stage = _join_plan(700)
    assert stage.is_join and [u.name for u in stage.upstreams] == ["l", "r"]
    h = Harness(compiled, stage)
    rng = random.Random(seed)

    # Dense in event time, many records right at the bound: many near or at the watermark.
    def stream(seed: int, side: str) -> list[tuple[str, Any, int]]:
        items = _stream(seed, 200, steps=(0, 10, 30, 60, 150), edges=0.5)
        return [(k, {"i": f"{side}{i}"}, ts) for i, (k, _, ts) in enumerate(items)]

    left, right = stream(seed, "l"), stream(seed + 100, "r")
    newest = [-(10**9), -(10**9)]
    li = ri = 0
    restarts = 0
    while li < len(left) or ri < len(right):
        if ri >= len(right) or li >= len(left):
            side = 0 if ri >= len(right) else 1
        else:  # mostly the side behind in event time: both stay near the watermark
            side = int(left[li][2] > right[ri][2])
            side = side if rng.random() < 0.8 else 1 - side
        source, at = (left, li) if side == 0 else (right, ri)
        size = rng.randrange(1, 6)
        batch = source[at : at + size]
        if side == 0:
            li += size
        else:
            ri += size
        h.records(batch, side=side)
        newest[side] = max([newest[side], *(ts for _, _, ts in batch)])
        if rng.random() < 0.7:
            # The highest under which none is late: a record is at most 299 ms behind the
            # newest of its side before it.
            h.advance(max(h.chain.watermark, min(newest) - 299))
        if rng.random() < 0.05:
            restarts += 1
            h.restart()
    h.advance(10**9)
    h.flush()
    want = Counter(
        (k, json.dumps([lv["i"], rv["i"]], separators=(",", ":")))
        for k, lv, lt in left
        for k2, rv, rt in right
        if k == k2 and abs(lt - rt) <= 700
    )
    assert h.late == [], f"{len(h.late)} records late"
    assert h.emitted() == want and sum(want.values()) > 50
    assert not h.backend.data, "expired join state is deleted"


def test_join_late_record_meets_nobody_and_expiry() -> None:
    compiled, stage = _join_plan(100)
    h = Harness(compiled, stage)
    h.records([("a", {"i": "l1"}, 1000)], side=0)
    h.advance(1050)
    h.records([("a", {"i": "r1"}, 1040)], side=1)  # below the watermark: late
    h.records([("a", {"i": "r2"}, 1100)], side=1)  # meets l1 (100 apart)
    h.advance(1101)  # l1 can meet nothing at or above 1101 any more: dropped
    h.records([("a", {"i": "r3"}, 1150)], side=1)
    h.flush()
    assert h.out == [(b"a", b'["l1","r2"]')]
    assert h.late == [(b"a", b'{"i":"r1"}')]
    state = json.loads(next(iter(h.backend.data.values())))
    assert [e[1]["i"] for e in state.get("l", [])] == [] and len(state["r"]) == 2


def test_timed_shuffle_records_carry_the_time() -> None:
    compiled, _ = _keyed_plan(lambda s: s.window(size_ms=10).count())
    source = compiled.stages[0]
    chain = StageChain(compiled, source, 3, DictBackend(), {"in.key_by": 2})
    newest = chain.values([{"k": "a", "ts": 5}, {"k": "b", "ts": 9}, {"ts": 1}, {"k": "c"}])
    assert newest == 9
    dead = chain.take_dead()
    assert [d.operator for d in dead] == ["in", "in.key_by"]  # no ts; no k
    chain.flush()
    bodies = [decode_shuffle(v) for _, v in chain.shuffles["in.key_by"].take(3)]
    assert sorted(p for _, body in bodies for p in body) == [
        ["a", {"k": "a", "ts": 5}, 5],
        [
            "b",
            {"k": "b", "ts": 9},
            9,
        ],
    ]
    assert {channel for channel, _ in bodies} == {3}


def test_kafka_timestamps_when_the_source_has_no_function() -> None:
    p = Pipeline()
    p.source("in").key_by(str).window(size_ms=10).count().sink("out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[0], 0, DictBackend(), {"in.key_by": 1})
    assert chain.values(["x", "y"], times=[7, 3]) == 7


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: p.source("a").key_by(str).window(size_ms=0), "positive"),
        (lambda p: p.source("a").key_by(str).window(), "give size_ms"),
        (lambda p: p.source("a").key_by(str).window(size_ms=5, gap_ms=3), "gap_ms alone"),
        (lambda p: p.source("a").key_by(str).window(size_ms=5, slide_ms=6), "larger"),
        (lambda p: p.source("a").key_by(str).window(gap_ms=5).aggregate(0, max), "merge="),
        (lambda p: p.source("a").key_by(str).window(gap_ms=5).process(print), "session"),
        (lambda p: p.source("a", idle_ms=0), "positive"),
        (lambda p: p.source("a", out_of_orderness_ms=-1), "non-negative"),
        (lambda p: p.source("a", timestamp=5), "expected a function"),
    ],
)
def test_bad_time_settings_are_one_line_errors(
    build: Callable[[Pipeline], object], message: str
) -> None:
    with pytest.raises(PipelineError, match=message):
        build(Pipeline())


def test_plan_refuses_a_window_without_time_or_aggregation_and_a_shared_join_input() -> None:
    p = Pipeline()
    p.source("a").key_by(str).count().window(size_ms=5).count().sink("o")
    with pytest.raises(PipelineError, match="need event time"):
        plan(p)
    p = Pipeline()
    p.source("a").key_by(str).window(size_ms=5)
    p.source("b").key_by(str).sink("o")
    with pytest.raises(PipelineError, match="follow it with an aggregation"):
        plan(p)
    p = Pipeline()
    left, right = p.source("a").key_by(str), p.source("b").key_by(str)
    left.join(right, within_ms=5).sink("o")
    right.count().sink("c")
    with pytest.raises(PipelineError, match="other uses"):
        plan(p)
    p = Pipeline()
    left = p.source("a").key_by(str)
    with pytest.raises(PipelineError, match="itself"):
        left.join(left, within_ms=5)


def test_untimed_pipelines_carry_no_time() -> None:
    p = Pipeline()
    p.source("a").key_by(str).count().sink("o")
    compiled = plan(p)
    assert not compiled.timed and not any(n.timed for s in compiled.stages for n in s.nodes)


def test_a_joins_channels_are_both_inputs_tasks_left_first() -> None:
    from processor.jobs.graph import JobGraph

    compiled, stage = _join_plan(10)
    graph = JobGraph("job", compiled)
    parallelism = {"l": 3, "r": 2, stage.name: 4}
    assert graph.channels(stage, parallelism) == 5
    assert graph.channel_base("l.key_by", parallelism) == 0
    assert graph.channel_base("r.key_by", parallelism) == 3
    assert [graph.side_of(stage, u, parallelism) for u in range(5)] == [0, 0, 0, 1, 1]
    assert graph.shuffle_topic("r.key_by") == graph.shuffle_topic(stage) == f"job.{stage.name}"
    assert graph.downstream(compiled.stages[1]) == [stage]
    assert [n.name for n in stage.stateful] == [stage.name]
    with pytest.raises(ValueError):
        graph.side_of(stage, 5, parallelism)


def test_one_source_on_both_sides_of_a_join() -> None:
    from processor.jobs.graph import JobGraph

    p = Pipeline()
    s = p.source("a", value="json", timestamp=lambda v: v["ts"])
    s.key_by(lambda v: v["x"], name="x").join(s.key_by(lambda v: v["y"], name="y"), 5).sink("o")
    compiled = plan(p)
    join = compiled.stages[1]
    graph = JobGraph("job", compiled)
    assert [u.name for u in join.upstreams] == ["a", "a"]
    assert graph.channels(join, {"a": 2, join.name: 2}) == 4
    assert graph.channel_base("y", {"a": 2}) == 2


def test_window_bounds_come_with_each_result() -> None:
    """``window(bounds=True)``: each result is ``{key, start, end, value}`` (issue #42: the
    Nexmark queries parsed ``"<key>@<start>"``); the key as ``key_by`` returned it."""
    from processor import Pipeline
    from processor.testing import Driver

    def first(value: Any, state: Any) -> list[Any]:
        if state.get() is None:
            state.set(True)
            return [value["v"]]
        return []

    p = Pipeline()
    s = p.source("in", value="json", timestamp=lambda r: r["t"])
    s.key_by(lambda r: r["k"]).window(size_ms=1000, bounds=True).count().sink("tumbling")
    hop = s.key_by(lambda r: r["k"]).window(size_ms=1000, slide_ms=500, bounds=True)
    hop.aggregate(0, lambda acc, r: acc + r["v"]).sink("hopping")
    s.key_by(lambda r: r["k"]).window(gap_ms=300, bounds=True).count().sink("sessions")
    s.key_by(lambda r: r["k"]).window(size_ms=1000, bounds=True).process(first).sink("first")
    s.key_by(lambda r: r["k"]).window(size_ms=1000).count().sink("plain")
    d = Driver(p)
    for k, v, t in [(7, 1, 100), (7, 2, 200), ("x", 3, 700), (7, 4, 1100)]:
        d.send("in", {"k": k, "v": v, "t": t})
    d.finish()

    def values(topic: str) -> list[Any]:
        return sorted((v for _, v in d.output(topic)), key=json.dumps)

    assert values("tumbling") == sorted(
        [
            {"key": 7, "start": 0, "end": 1000, "value": 2},
            {"key": "x", "start": 0, "end": 1000, "value": 1},
            {"key": 7, "start": 1000, "end": 2000, "value": 1},
        ],
        key=json.dumps,
    )
    assert {(v["key"], v["start"], v["end"]): v["value"] for v in values("hopping")} == {
        (7, -500, 500): 3,
        (7, 0, 1000): 3,
        (7, 500, 1500): 4,
        (7, 1000, 2000): 4,
        ("x", 0, 1000): 3,
        ("x", 500, 1500): 3,
    }
    assert {(v["key"], v["start"], v["end"]): v["value"] for v in values("sessions")} == {
        (7, 100, 500): 2,
        ("x", 700, 1000): 1,
        (7, 1100, 1400): 1,
    }
    assert {(v["key"], v["start"], v["end"]): v["value"] for v in values("first")} == {
        (7, 0, 1000): 1,
        ("x", 0, 1000): 3,
        (7, 1000, 2000): 4,
    }
    assert sorted(d.output("plain")) == [("7@0", 2), ("7@1000", 1), ("x@0", 1)]
    with pytest.raises(PipelineError, match="bounds must be True or False"):
        p.source("other", value="json").key_by(lambda r: r).window(size_ms=1, bounds=1)  # type: ignore[call-overload]


def test_a_join_without_a_bound_meets_every_partner_and_drops_nothing() -> None:
    """``join(within_ms=None)``: SQL's inner join (issue #42's q3). Partners far apart in
    time meet, a record behind the watermark is not late, each pair comes once, by the
    later record; nothing sets a timer or expires."""
    from processor.testing import Driver

    p = Pipeline()
    s = p.source("in", value="json", timestamp=lambda r: r["t"])
    left = s.filter(lambda r: r["side"] == "l").key_by(lambda r: r["k"])
    right = s.filter(lambda r: r["side"] == "r").key_by(lambda r: r["k"])
    pairs = left.join(right, within_ms=None)
    pairs.map(lambda pair: [pair[0]["v"], pair[1]["v"]]).sink("pairs")
    d = Driver(p)
    events = [
        ("l", 1, "a", 100),
        ("r", 1, "b", 500_000),  # far after its partner: meets it
        ("l", 2, "c", 600_000),
        ("r", 1, "d", 50),  # behind the watermark: still meets both lefts of key 1
        ("l", 1, "e", 700_000),  # meets both rights of key 1
        ("r", 2, "f", 700_001),
    ]
    for side, k, v, t in events:
        d.send("in", {"side": side, "k": k, "v": v, "t": t})
    d.advance_watermark(10_000_000)
    d.finish()
    got = Counter((k, tuple(v)) for k, v in d.output("pairs"))
    assert got == Counter(
        {
            ("1", ("a", "b")): 1,
            ("1", ("a", "d")): 1,
            ("1", ("e", "b")): 1,
            ("1", ("e", "d")): 1,
            ("2", ("c", "f")): 1,
        }
    )
    assert d.late_records() == []
