"""State TTL (`processor.engine.expiry`, `processor.engine.ttl`) on a stage chain without
Kafka: every operator kind in wall-clock and event-time mode, ``state.set(ttl_ms=)``, an
expired key starting from nothing, deadlines rebuilt at a restore, expiry without a scan of
the state, argument checks, and `processor.testing` giving the same."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.api.streams import KeyedStream
from processor.engine.chain import StageChain
from processor.plan.stages import plan
from processor.testing import Driver, run
from processor.testing_tasks import MemoryState
from tests.unit.test_chain import restored

TTL = 1_000
Shape = Callable[[KeyedStream[Any, Any]], KeyedStream[Any, Any]]


def _counter(value: Any, state: Any) -> list[int]:
    n = state.get(0) + 1
    state.set(n)
    return [n]


def _counter_ttl(value: Any, state: Any) -> list[int]:
    n = state.get(0) + 1
    state.set(n, ttl_ms=TTL)
    return [n]


# Per operator kind: the stream after key_by -> one with a TTL whose value per key is the
# number of records since the key (re)started.
KINDS: dict[str, Shape] = {
    "count": lambda s: s.count(ttl_ms=TTL),
    "count-record": lambda s: s.count(emit="record", ttl_ms=TTL),
    "sum": lambda s: s.map(lambda v: v["n"]).sum(ttl_ms=TTL),
    "reduce": lambda s: s.map(lambda v: v["n"]).reduce(lambda a, b: a + b, ttl_ms=TTL),
    "reduce-record": lambda s: s.map(lambda v: v["n"]).reduce(
        lambda a, b: a + b, emit="record", ttl_ms=TTL
    ),
    "aggregate": lambda s: s.aggregate(0, lambda a, v: a + v["n"], ttl_ms=TTL),
    "aggregate-record": lambda s: s.aggregate(
        0, lambda a, v: a + v["n"], emit="record", ttl_ms=TTL
    ),
    "process": lambda s: s.process(_counter, ttl_ms=TTL),
    "process-set": lambda s: s.process(_counter_ttl),
}


def _shape(kind: str, timed: bool) -> Shape:
    """``KINDS[kind]``; a process with per-key TTLs only is in event time only in a timed
    pipeline, here made so by an event-time timer."""
    if kind == "process-set" and timed:
        return lambda s: s.process(_counter_ttl, on_timer=lambda at, state: [])
    return KINDS[kind]


class CountingState(MemoryState):
    """The dict backend, counting the keys read and written."""

    def __init__(self) -> None:
        super().__init__()
        self.read = self.written = 0

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self.read += len(keys)
        return super().get_many(keys)

    def write(self, items: Mapping[bytes, bytes | None]) -> None:
        self.written += len(items)
        super().write(items)


class Task:
    """One keyed task's chain over a dict backend; `restart` rebuilds it from the state."""

    def __init__(self, shape: Shape, timed: bool) -> None:
        p = Pipeline()
        ts = (lambda v: v["ts"]) if timed else None
        shape(p.source("in", value="json", timestamp=ts).key_by(lambda v: v["k"])).sink("out")
        self.compiled, self.timed = plan(p), timed
        self.stage = self.compiled.stages[1]
        self.backend = CountingState()
        self.out: list[tuple[str, Any]] = []
        self.chain = self._chain()

    def _chain(self) -> StageChain:
        return StageChain(self.compiled, self.stage, 0, self.backend, {})

    def send(self, key: str, ts: int = 0, n: int = 1) -> None:
        value = {"k": key, "n": n, "ts": ts}
        self.chain.shuffled([[key, value, ts]] if self.timed else [[key, value]])

    def flush(self, now: int | None = None) -> None:
        if now is not None:
            assert self.chain.ticks or self.timed  # a timed chain's TTLs ignore the clock
            self.chain.tick(now)
        self.chain.flush()
        for records in self.chain.take_sinks().values():
            self.out += [((k or b"").decode(), json.loads(v)) for k, v in records]

    def restart(self) -> None:
        """What a restore does: the flushed state, the watermark, timers from the state."""
        self.flush()
        self.chain = restored(self.chain, self._chain, self.backend.data)

    def stored(self) -> set[str]:
        """The keys with a value in state (any operator), and those with a deadline."""
        return {k.decode().replace("\0", " ") for k in self.backend.data}

    def values(self, key: str) -> list[Any]:
        return [v for k, v in self.out if k == key]


@pytest.mark.parametrize("kind", KINDS)
def test_wall_clock_ttl_deletes_a_key_not_updated_for_that_long(kind: str) -> None:
    t = Task(_shape(kind, False), timed=False)
    t.send("a")
    t.send("b")
    t.flush(now=0)
    t.send("a")
    t.flush(now=500)  # a: deadline 1500, b: 1000
    t.flush(now=999)
    assert any(k.endswith(" b") for k in t.stored())
    t.flush(now=1000)
    assert not any(k.endswith(" b") for k in t.stored()), t.stored()  # value and deadline gone
    assert any(k.endswith(" a") for k in t.stored())
    t.flush(now=1500)
    assert t.backend.data == {}
    t.send("a")
    t.flush(now=1600)
    assert t.values("a") == [1, 2, 1]  # an expired key starts again from nothing
    assert t.values("b") == [1]  # nothing emitted on expiry


@pytest.mark.parametrize("kind", KINDS)
def test_event_time_ttl_counts_from_the_records_and_expires_by_the_watermark(kind: str) -> None:
    t = Task(_shape(kind, True), timed=True)
    t.send("a", ts=0)
    t.send("b", ts=0)  # deadlines 1000
    t.chain.advance(100)
    t.flush(now=10**12)  # the wall clock plays no part
    t.send("a", ts=600)
    t.chain.advance(700)
    t.send("a", ts=800)  # a: 1800
    t.send("a", ts=300)  # out of order: a keeps 1800
    t.flush()
    t.chain.advance(999)
    t.flush()
    assert any(k.endswith(" b") for k in t.stored())
    t.chain.advance(1000)
    t.flush()
    assert not any(k.endswith(" b") for k in t.stored())
    t.chain.advance(1799)
    assert any(k.endswith(" a") for k in t.stored())
    t.chain.advance(1800)
    t.flush()
    assert t.backend.data == {}
    t.send("a", ts=2000)
    t.send("b", ts=2000)
    t.flush()
    assert t.values("a")[-1] == 1 and t.values("b")[-1] == 1


def test_a_pending_update_is_emitted_before_its_key_expires() -> None:
    """An emit="checkpoint" aggregation whose key expires mid-epoch emits its last value
    first (its changelog is not cut short), then starts from nothing."""
    t = Task(KINDS["count"], timed=True)
    t.send("a", ts=0)
    t.chain.advance(100)
    t.flush()
    t.send("a", ts=200)  # dirty: 2
    t.chain.advance(5_000)  # updated under 100: expired
    assert t.chain.take_sinks() == {"out": [(b"a", b"2")]}
    t.send("a", ts=5_000)
    t.flush()
    assert t.values("a") == [1, 1]
    assert len(t.backend.data) == 2  # the new value and its deadline


def test_a_key_that_comes_back_in_the_epoch_it_expired_in_is_stored_anew() -> None:
    t = Task(KINDS["process"], timed=True)
    t.send("a", ts=0)
    t.chain.advance(100)
    t.flush()
    t.chain.advance(2_000)  # expired; its deletion is written at the flush
    t.send("a", ts=2_000)  # reads as missing already
    t.send("a", ts=2_001)
    t.flush()
    assert t.values("a") == [1, 1, 2]
    t.restart()
    t.send("a", ts=2_002)
    t.flush()
    assert t.values("a")[-1] == 3


def test_state_set_ttl_is_per_key_and_a_set_without_one_keeps_the_key() -> None:
    def fn(value: Any, state: Any) -> list[Any]:
        if value["n"]:
            state.set(value["n"], ttl_ms=value["n"])
        else:
            state.set(0)  # no TTL: kept for good
        return []

    t = Task(lambda s: s.process(fn), timed=False)
    t.send("short", n=100)
    t.send("long", n=10_000)
    t.send("kept", n=5)
    t.flush(now=0)
    t.send("kept", n=0)
    t.flush(now=1)
    t.flush(now=100)
    assert {k.split(" ")[-1] for k in t.stored()} == {"long", "kept"}
    t.flush(now=10**6)
    assert {k.split(" ")[-1] for k in t.stored()} == {"kept"}


@pytest.mark.parametrize("restart", [False, True])
def test_a_shorter_ttl_in_event_time_shortens_the_deadline(restart: bool) -> None:
    """``state.set(v, ttl_ms=short)`` after a longer one: the deadline is the latest record's
    time plus the latest TTL, as with the clock (it used to keep the later deadline); an
    out-of-order record does not move the time back, through a restore too."""

    def fn(value: Any, state: Any) -> list[Any]:
        state.set(value["n"], ttl_ms=value["n"])
        return []

    t = Task(lambda s: s.process(fn, on_timer=lambda at, state: []), timed=True)
    t.send("a", ts=1_000, n=100_000)  # deadline 101,000
    t.chain.advance(1_001)
    t.flush()
    if restart:
        t.restart()
    t.send("a", ts=2_000, n=500)  # deadline 2,500
    t.send("a", ts=1_500, n=800)  # out of order: 2,000 + 800
    t.chain.advance(2_001)
    t.flush()
    if restart:
        t.restart()
    t.chain.advance(2_799)
    t.flush()
    assert t.stored()
    t.chain.advance(2_800)
    t.flush()
    assert t.backend.data == {}


def test_delete_forgets_the_deadline() -> None:
    def fn(value: Any, state: Any) -> list[Any]:
        if value["n"]:
            state.set(1)
        else:
            state.delete()
        return []

    t = Task(lambda s: s.process(fn, ttl_ms=TTL), timed=False)
    t.send("a")
    t.flush(now=0)
    assert len(t.backend.data) == 2  # the value and its deadline
    t.send("a", n=0)
    t.flush(now=1)
    assert t.backend.data == {}


def test_timers_stay_when_a_process_key_expires() -> None:
    def fn(value: Any, state: Any) -> list[Any]:
        state.set(value["n"])
        state.timers.set(state.timestamp + 5_000)
        return []

    def on_timer(at_ms: int, state: Any) -> list[Any]:
        return [state.get("gone")]

    t = Task(lambda s: s.process(fn, on_timer=on_timer, ttl_ms=TTL), timed=True)
    t.send("a", ts=0, n=7)
    t.chain.advance(1)
    t.chain.advance(6_000)  # expires at 1001, its timer fires at 5001 on nothing
    t.flush()
    assert t.values("a") == ["gone"]


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("kind", ["count", "reduce-record", "process", "process-set"])
def test_a_restore_rebuilds_the_deadlines(kind: str, timed: bool) -> None:
    """The same deletions with and without a restart in the middle."""
    runs = []
    for restart in (False, True):
        t = Task(_shape(kind, timed), timed=timed)
        for i, key in enumerate("abcde"):
            t.send(key, ts=i * 300)
            if timed:
                t.chain.advance(i * 300 + 1)
            t.flush(now=None if timed else i * 300)
        if restart:
            t.restart()
        left = []
        for now in (1_000, 1_400, 1_700, 2_000, 2_500):
            if timed:
                t.chain.advance(now)
            t.flush(now=None if timed else now)
            left.append(sorted(t.stored()))
        runs.append(left)
        assert left[-1] == []
    assert runs[0] == runs[1]
    assert len({len(keys) for keys in runs[0]}) > 2  # keys went one by one


def test_a_deadline_set_before_the_first_watermark_survives_a_restore() -> None:
    t = Task(KINDS["process"], timed=True)
    t.send("a", ts=0)
    t.restart()
    t.chain.advance(999)
    t.flush()
    assert t.stored()
    t.chain.advance(1_000)
    t.flush()
    assert t.backend.data == {}


def test_an_update_without_a_record_time_counts_from_the_watermark_it_came_under() -> None:
    """A TTL aggregation fed by another aggregation of its stage has no record times: its
    keys count from the watermark they were updated under (stored as pending before the
    first one, and stamped by it after a restore)."""
    t = Task(lambda s: s.count().reduce(lambda a, b: b, ttl_ms=TTL), timed=True)
    t.send("a", ts=5_000)
    t.restart()  # the count's update reached the reduce at this flush: no watermark yet
    t.chain.advance(50)  # stamped from it: 1050
    t.chain.advance(1_049)
    t.flush()
    assert any("reduce" in k for k in t.stored())
    t.chain.advance(1_050)
    t.flush()
    assert not any("reduce" in k for k in t.stored())


@pytest.mark.parametrize("timed", [False, True])
def test_expiry_reads_nothing_and_writes_only_what_changed(timed: bool) -> None:
    """No scan: with 5,000 keys in state, an epoch touching 5 reads 5 keys and writes their
    values and deadlines; one expiring keys writes only their deletions."""
    t = Task(KINDS["count"], timed=timed)
    total = 5_000
    t.chain.shuffled(
        [[f"k{i}", {"n": 1}, 0] if timed else [f"k{i}", {"n": 1}] for i in range(total)]
    )
    if timed:
        t.chain.advance(0)
    t.flush(now=0)  # deadlines 1000
    for start in range(0, 200, 5):  # 5 keys an epoch updated again, at 10..205
        now = 10 + start
        t.backend.read = t.backend.written = 0
        if timed:
            t.chain.advance(now)
        for i in range(start, start + 5):
            t.send(f"k{i}", ts=now)
        t.flush(now=now)
        assert t.backend.read == 5
        assert t.backend.written == 10  # 5 values, 5 deadlines
    t.backend.read = t.backend.written = 0
    if timed:
        t.chain.advance(TTL)
    t.flush(now=TTL)  # the keys not updated again expire: 4,800 of them
    assert t.backend.read == 0
    assert t.backend.written == 2 * (total - 200)
    t.backend.read = t.backend.written = 0
    if timed:
        t.chain.advance(TTL + 10)
    t.flush(now=TTL + 10)  # the first 5 updated again
    assert t.backend.read == 0
    assert t.backend.written == 10
    assert len(t.backend.data) == 2 * 195


@pytest.mark.parametrize("bad", [0, -5, 1.5, "10", True, [1]])
@pytest.mark.parametrize("kind", ["count", "sum", "reduce", "aggregate", "process"])
def test_ttl_must_be_a_positive_int(kind: str, bad: Any) -> None:
    keyed = Pipeline().source("in").key_by(str)
    calls: dict[str, Callable[[], Any]] = {
        "count": lambda: keyed.count(ttl_ms=bad),
        "sum": lambda: keyed.sum(ttl_ms=bad),
        "reduce": lambda: keyed.reduce(max, ttl_ms=bad),
        "aggregate": lambda: keyed.aggregate(0, max, ttl_ms=bad),
        "process": lambda: keyed.process(_counter, ttl_ms=bad),
    }
    with pytest.raises(PipelineError) as info:
        calls[kind]()
    assert str(info.value) == (
        f"{kind}(ttl_ms={bad!r}): expected a positive number of milliseconds, got {bad!r}"
    )


def test_a_window_takes_no_ttl() -> None:
    windows = Pipeline().source("in", timestamp=lambda v: 0).key_by(str).window(size_ms=10)
    with pytest.raises(PipelineError, match=r"^count\(ttl_ms=...\) on a window: .*$"):
        windows.count(ttl_ms=10)


def test_a_bad_ttl_in_state_set_makes_a_dead_record() -> None:
    def fn(value: Any, state: Any) -> list[Any]:
        state.set(1, ttl_ms=value["n"])
        return [1]

    t = Task(lambda s: s.process(fn), timed=False)
    t.send("a", n=0)
    t.send("b", n=10)
    t.flush(now=0)
    dead = t.chain.take_dead()
    assert [d.error for d in dead] == [
        "RecordError: state.set(ttl_ms=0): expected a positive int of ms"
    ] or "state.set(ttl_ms=0)" in dead[0].error
    assert t.values("b") == [1] and t.values("a") == []


def test_no_ttl_no_ticks_and_no_filter() -> None:
    t = Task(lambda s: s.process(_counter), timed=False)
    assert not t.chain.ticks
    assert t.chain._reader is t.backend


def _first_sight(ttl_ms: int) -> Pipeline:
    """Per user, the events that are the first of the user in ``ttl_ms`` of event time."""

    def fn(event: Any, state: Any) -> list[Any]:
        new = state.get() is None
        state.set(1)
        return [event["i"]] if new else []

    p = Pipeline()
    events = p.source("events", value="json", timestamp=lambda e: e["ts"])
    events.key_by(lambda e: e["user"]).process(fn, ttl_ms=ttl_ms).sink("first")
    return p


def test_the_driver_expires_by_the_watermark_alike_at_any_checkpointing() -> None:
    events = [
        {"user": u, "ts": ts, "i": i}
        for i, (u, ts) in enumerate(
            [
                *[("a", 0), ("b", 10), ("a", 500), ("a", 2_000), ("b", 2_100), ("a", 2_200)],
                *[("a", 9_000), ("c", 9_100), ("b", 9_200), ("a", 9_300)],
            ]
        )
    ]
    results = {
        (every, parts): run(_first_sight(1_000), {"events": events}, every, partitions=parts)
        for every in (1, 3, 1000)
        for parts in (1, 3)
    }
    firsts = {k: sorted(v for _, v in r["first"]) for k, r in results.items()}
    # Checkpoints carry the watermark in the driver: with one at the end only, nothing
    # expires before it; with one per record the watermark follows each record.
    # A record is processed under the watermark before it: a@2000 still finds a (deadline
    # 500 + 1000 passes only by the watermark it brings), b@2100 does not (1010).
    assert firsts[1, 1] == [0, 1, 4, 7, 8]
    assert firsts[1, 1] == firsts[1, 3]
    assert firsts[1000, 1] == firsts[1000, 3] == [0, 1, 7]


def test_the_driver_expires_by_its_clock_without_event_time() -> None:
    p = Pipeline()
    p.source("clicks").key_by(str).count(ttl_ms=60_000).sink("n")
    d = Driver(p)
    d.send("clicks", "a")
    d.checkpoint()  # an update counts from the checkpoint after it: deadline 60 s
    d.advance_clock(30_000)
    d.send("clicks", "a")
    d.checkpoint()  # 90 s
    d.advance_clock(89_999)
    d.send("clicks", "b")
    d.checkpoint()
    d.advance_clock(90_000)  # a: gone
    d.send("clicks", "a")
    d.finish()
    assert d.output("n") == [("a", 1), ("a", 2), ("b", 1), ("a", 1)]


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("kind", ["count", "count-record", "process"])
def test_a_quiet_replay_expires_the_same_keys(kind: str, timed: bool) -> None:
    """The replay after a fallback restore runs quietly: the same state, nothing out."""
    states = []
    for quiet in (False, True):
        t = Task(_shape(kind, timed), timed=timed)
        for step in range(12):
            key = "abc"[step % 3] if step < 6 else "a"
            value = {"k": key, "n": 1, "ts": step * 400}
            t.chain.shuffled([[key, value, step * 400]] if timed else [[key, value]], quiet)
            if timed:
                t.chain.advance(step * 400, quiet)
            else:
                t.chain.tick(step * 400, quiet)
            t.chain.flush(quiet)
        states.append(dict(t.backend.data))
        assert not t.chain.take_sinks() if quiet else True
    assert states[0] == states[1]
    assert not any(b"\0b" in k for k in states[0])  # b expired in both


@pytest.mark.parametrize("timed", [False, True])
def test_an_event_time_ttl_is_not_pre_aggregated(timed: bool) -> None:
    """Combined partial counts carry no record times: an event-time TTL's stage takes every
    record; a wall-clock one's still combines."""
    p = Pipeline()
    source = p.source("in", value="json", timestamp=(lambda v: v["ts"]) if timed else None)
    source.key_by(lambda v: v["k"]).count(ttl_ms=TTL).sink("out")
    compiled = plan(p)
    assert compiled.timed is timed
    assert (compiled.stages[1].combiner is None) is timed


def test_a_processing_time_timer_sets_a_ttl_from_the_watermark_in_event_time() -> None:
    """Its time is the wall clock's, no event time: the TTL counts from the watermark."""

    def fn(value: Any, state: Any) -> list[Any]:
        state.timers.set(10**12)  # wall-clock ms
        return []

    def on_timer(at_ms: int, state: Any) -> list[Any]:
        state.set("from a timer", ttl_ms=TTL)
        return []

    p = Pipeline()
    source = p.source("in", value="json", timestamp=lambda v: v["ts"])
    keyed = source.key_by(lambda v: v["k"])
    keyed.process(fn, on_timer=on_timer, processing_time=True, ttl_ms=TTL).sink("out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[1], 0, MemoryState(), {})
    chain.shuffled([["a", {"k": "a", "ts": 0}, 0]])
    chain.advance(100)
    chain.tick(10**12)
    chain.flush()  # stamped under the watermark 100: deadline 1100
    chain.advance(1_099)
    assert chain._state.get_many([b"in.key_by.process\0a"]) == [b'"from a timer"']
    chain.advance(1_100)
    chain.flush()
    assert chain._state.get_many([b"in.key_by.process\0a"]) == [None]


def test_a_window_state_takes_no_ttl() -> None:
    def fn(value: Any, state: Any) -> list[Any]:
        state.set(1, ttl_ms=TTL)
        return []

    p = Pipeline()
    source = p.source("in", value="json", timestamp=lambda v: v["ts"])
    source.key_by(lambda v: v["k"]).window(size_ms=1_000).process(fn).sink("out")
    d = Driver(p)
    d.send("in", {"k": "a", "ts": 0}, timestamp=0)
    d.finish()
    (dead,) = d.dead_records()
    assert "state.set(ttl_ms=...) in a process on windows" in dead.error
