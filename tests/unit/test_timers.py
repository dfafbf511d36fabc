"""Timers in ``process`` (`processor.engine.timers`) on a stage chain without Kafka:
firing order, the ``state.timers`` calls, restores from the stored state, quiet replays,
processing-time timers by an injected clock, failing callbacks; and the cart example of
issue 23 against a direct computation, with random batching, watermarks and restarts."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.api.streams import KeyedStream
from processor.engine.chain import StageChain
from processor.engine.time import NO_WATERMARK
from processor.plan.stages import Plan, Stage, plan
from tests.integration.carts_pipeline import CART_MS, expired, track
from tests.unit.test_chain import DictBackend
from tests.unit.test_timed_stages import Chained, _chained
from tests.unit.test_timed_stages import _drive as _timed_drive
from tests.unit.test_timed_stages import _stream as _timed_stream
from tests.unit.test_windows import Harness


def _stage(shape: Any, timed: bool = True) -> tuple[Plan, Stage]:
    p = Pipeline()
    source = p.source("in", value="json", timestamp=(lambda v: v["ts"]) if timed else None)
    shape(source.key_by(lambda v: v["k"])).sink("out")
    compiled = plan(p)
    return compiled, compiled.stages[1]


def _values(h: Harness) -> list[Any]:
    return [json.loads(v) for _, v in h.out]


class Log:
    """A process that logs what it sees: (what, key, time, pending) per call."""

    def __init__(self, refire: int | None = None) -> None:
        self.calls: list[tuple[str, Any, int | None, list[int]]] = []
        self.refire = refire

    def process(self, value: dict[str, Any], state: Any) -> list[Any]:
        self.calls.append(("record", state.key, state.timestamp, state.timers.pending()))
        for at in value.get("set", []):
            state.timers.set(at)
        for at in value.get("delete", []):
            state.timers.delete(at)
        if value.get("clear"):
            state.timers.clear()
        return []

    def on_timer(self, at_ms: int, state: Any) -> list[Any]:
        self.calls.append(("timer", state.key, state.timestamp, state.timers.pending()))
        if self.refire is not None and at_ms < self.refire:
            state.timers.set(at_ms + 100)
        return [at_ms]


def _logged(refire: int | None = None) -> tuple[Harness, Log]:
    log = Log(refire)
    compiled, stage = _stage(lambda s: s.process(log.process, on_timer=log.on_timer))
    return Harness(compiled, stage), log


def test_timers_fire_in_time_then_key_order_once_the_watermark_passes_them() -> None:
    h, log = _logged()
    h.records([("b", {"set": [200, 100]}, 10), ("a", {"set": [200, 100, 100]}, 20)])
    h.advance(100)  # a timer at 100 waits for a watermark above it: a record at 100 may come
    assert [c for c in log.calls if c[0] == "timer"] == []
    h.records([("a", {}, 100)])
    h.advance(201)
    h.flush()
    assert [c[:3] for c in log.calls[3:]] == [
        ("timer", "a", 100),
        ("timer", "b", 100),
        ("timer", "a", 200),
        ("timer", "b", 200),
    ]
    assert h.out == [(b"a", b"100"), (b"b", b"100"), (b"a", b"200"), (b"b", b"200")]
    assert h.backend.data.keys() == set()  # every timer fired: nothing stored
    h.advance(10_000)
    h.flush()
    assert len(h.out) == 4  # each once


def test_set_delete_clear_pending_and_a_firing_timer_is_not_pending() -> None:
    h, log = _logged()
    h.records([("a", {"set": [300, 100, 200, 100]}, 1)])
    h.records([("a", {"delete": [200, 999]}, 2)])
    h.records([("a", {}, 3)])
    assert log.calls[-1] == ("record", "a", 3, [100, 300])
    h.advance(150)
    assert log.calls[-1] == ("timer", "a", 100, [300])  # it left pending() before the call
    h.records([("a", {"clear": True}, 400)])
    h.advance(10_000)
    h.flush()
    assert h.out == [(b"a", b"100")]
    assert h.backend.data == {}


def test_a_timer_set_in_on_timer_fires_in_the_next_round() -> None:
    h, log = _logged(refire=300)
    h.records([("a", {"set": [100]}, 1)])
    h.advance(1000)  # 100 fires and sets 200: due already, it fires at the next rise
    assert [c[2] for c in log.calls if c[0] == "timer"] == [100]
    h.advance(1001)
    h.advance(1002)
    h.flush()
    assert [c[2] for c in log.calls if c[0] == "timer"] == [100, 200, 300]
    assert [v for _, v in h.out] == [b"100", b"200", b"300"]


def test_timer_output_keeps_its_time_and_is_never_behind_the_watermark() -> None:
    """A timer's output carries its time downstream (here into a window), or the watermark
    before the round that fires it if it was set after the watermark passed it: never late."""
    log = Log()
    compiled, stage = _stage(
        lambda s: s.process(log.process, on_timer=log.on_timer).window(size_ms=100).count()
    )
    h = Harness(compiled, stage)
    h.records([("a", {"set": [150, 450]}, 10)])
    h.advance(200)  # fires 150: its window [100, 200) is closed by the same watermark
    h.records([("a", {"set": [50]}, 210)])  # set after the watermark passed it
    h.advance(500)  # fires 50 (as of time 200) and 450
    h.flush()
    assert h.late == []
    assert sorted(h.out) == [(b"a@100", b"1"), (b"a@200", b"1"), (b"a@400", b"1")]


def test_restore_from_the_state_fires_each_timer_once() -> None:
    h, log = _logged()
    h.records([("a", {"set": [100, 200]}, 1), ("b", {"set": [150]}, 1)])
    h.advance(160)
    h.restart()  # 100 and 150 fired before the checkpoint, 200 pending
    h.restart()
    h.advance(1000)
    h.flush()
    assert sorted(h.out) == [(b"a", b"100"), (b"a", b"200"), (b"b", b"150")]
    assert [c[2] for c in log.calls if c[0] == "timer"] == [100, 150, 200]


def test_fired_timers_before_a_restart_that_was_not_flushed_fire_again_once() -> None:
    """A failure before the flush: the restored state still has the timer (its output was
    never committed either), so it fires after the restore, once."""
    h, _ = _logged()
    h.records([("a", {"set": [100]}, 1)])
    h.flush()
    backend = h.backend
    h.chain.advance(500)  # fires, output not taken: the task dies before its checkpoint
    h.chain = h._chain()
    for prefix in h.chain.timed_operators():
        items = sorted((k, v) for k, v in backend.data.items() if k.startswith(prefix))
        h.chain.restore_timers(prefix, items)
    h.out = []
    h.advance(500)
    h.flush()
    assert h.out == [(b"a", b"100")]


def test_a_quiet_replay_updates_timers_and_emits_nothing() -> None:
    """The replay after a fallback: records and watermarks go into the state quietly, and
    timers that fired in the replayed epochs do not fire again after it."""
    h, _ = _logged()
    h.chain.shuffled([["a", {"set": [100, 300]}, 1]], quiet=True)
    h.chain.advance(200, quiet=True)  # 100 fired in the first run: its output is committed
    h.flush()
    assert h.out == [] and h.chain.dead == []
    h.advance(1000)
    h.flush()
    assert h.out == [(b"a", b"300")]


def _cart_stream(seed: int, users: int = 30) -> list[tuple[str, dict[str, Any], int]]:
    """Cart events in event-time order, each user's adds less than 20 s apart, a checkout or
    silence after; a checked-out user may come back."""
    rng = random.Random(seed)
    events: list[tuple[str, dict[str, Any], int]] = []
    for u in range(users):
        t = rng.randrange(100_000)
        for _ in range(rng.randrange(1, 3)):
            for _ in range(rng.randrange(1, 5)):
                t += rng.randrange(1, 20_000)
                events.append((f"u{u}", {"type": "add", "ts": t}, t))
            if rng.random() < 0.5:
                t += rng.randrange(1, 20_000)
                events.append((f"u{u}", {"type": "checkout", "ts": t}, t))
                t += rng.randrange(1, 60_000)
            else:
                break  # abandoned: the user never comes back
    return sorted(events, key=lambda e: e[2])


def cart_outcomes(events: list[tuple[str, dict[str, Any], int]]) -> Counter[tuple[str, str]]:
    """What the cart pipeline emits, directly: per user in order, a checkout's item count,
    and an abandoned cart 30 s after its last add."""
    out: Counter[tuple[str, str]] = Counter()
    carts: dict[str, tuple[int, int]] = {}
    for user, event, ts in events:
        items, _ = carts.get(user, (0, 0))
        if event["type"] == "add":
            carts[user] = (items + 1, ts)
        elif event["type"] == "checkout":
            carts.pop(user, None)
            out[user, json.dumps({"user": user, "checked_out": items})] += 1
    for user, (items, last) in carts.items():
        record = {"user": user, "abandoned": items, "at": last + CART_MS}
        out[user, json.dumps(record)] += 1
    return out


@pytest.mark.parametrize("seed", range(8))
def test_cart_example_with_random_batches_watermarks_and_restarts(seed: int) -> None:
    compiled, stage = _stage(lambda s: s.process(track, on_timer=expired))
    h = Harness(compiled, stage)
    events = _cart_stream(seed)
    rng = random.Random(seed)
    i = 0
    while i < len(events):
        size = rng.randrange(1, 8)
        batch = events[i : i + size]
        i += size
        h.records(batch)
        if rng.random() < 0.5:  # up to where every later record is
            h.advance(max(h.chain.watermark, batch[-1][2] - rng.randrange(1000)))
        if rng.random() < 0.3:
            h.flush()
        if rng.random() < 0.1:
            h.restart()
    h.advance(10**12)
    h.flush()
    got = Counter(
        ((k or b"").decode(), json.dumps(json.loads(v))) for k, v in h.out
    )  # the same JSON spacing
    assert got == cart_outcomes(events)
    assert h.backend.data == {}  # every cart and timer gone


def test_a_failing_on_timer_is_a_dead_record_and_does_not_fire_again() -> None:
    def boom(at_ms: int, state: Any) -> list[Any]:
        raise ValueError(f"no {at_ms} for {state.key}")

    compiled, stage = _stage(
        lambda s: s.process(lambda v, st: st.timers.set(v["at"]) or [], on_timer=boom)
    )
    h = Harness(compiled, stage)
    h.records([("a", {"at": 100}, 1), ("b", {"at": "soon"}, 1)])  # "soon": not a time
    h.advance(200)
    dead = h.chain.take_dead()
    h.restart()
    h.advance(300)
    h.flush()
    errors = ["timer time 'soon' is not a number of ms", "ValueError: no 100 for a"]
    assert [d.error for d in dead] == errors
    assert dead[1].value == b'{"timer":100,"key":"a"}'
    assert h.chain.take_dead() == [] and h.out == [] and h.backend.data == {}


def test_timers_without_on_timer_are_refused_per_record() -> None:
    compiled, stage = _stage(lambda s: s.process(lambda v, st: st.timers.set(5) or []))
    assert not compiled.timed  # a process without timers needs no event time
    chain = StageChain(compiled, stage, 0, DictBackend(), {})
    chain.shuffled([["a", {}]])
    (dead,) = chain.take_dead()
    assert "no on_timer" in dead.error


def test_state_key_is_the_key_as_given_and_timestamp_the_records_time() -> None:
    seen: list[tuple[Any, Any]] = []

    def look(value: Any, state: Any) -> list[Any]:
        seen.append((state.key, state.timestamp))
        return []

    p = Pipeline()
    events = p.source("in", value="json", timestamp=lambda v: v["ts"])
    events.key_by(lambda v: v["k"]).process(look, on_timer=lambda at, st: []).sink("out")
    compiled = plan(p)
    h = Harness(compiled, compiled.stages[1])
    h.chain.shuffled([["\x00[1,2]", {}, 7], ["s", {}, 8]])
    assert seen == [([1, 2], 7), ("s", 8)]
    untimed = Pipeline()
    untimed.source("in").key_by(str).process(look).sink("out")
    compiled = plan(untimed)
    chain = StageChain(compiled, compiled.stages[1], 0, DictBackend(), {})
    chain.shuffled([["w", "w"]])
    assert seen[-1] == ("w", None)


def _clocked() -> tuple[Harness, Log]:
    log = Log()
    compiled, stage = _stage(
        lambda s: s.process(log.process, on_timer=log.on_timer, processing_time=True),
        timed=False,
    )
    assert not compiled.timed  # processing time needs no event time

    class Untimed(Harness):
        def records(self, items: list[tuple[str, Any, int]], side: int = 0) -> None:
            self.chain.shuffled([[k, v] for k, v, _ in items])

    return Untimed(compiled, stage), log


def test_processing_time_timers_fire_by_the_injected_clock() -> None:
    h, log = _clocked()
    assert h.chain.ticks
    h.records([("a", {"set": [1_000, 3_000]}, 0), ("b", {"set": [2_000]}, 0)])
    h.chain.advance(10**12)  # the watermark does nothing to them
    h.chain.tick(999)
    assert h.chain.take_sinks() == {}
    h.chain.tick(2_000)
    h.flush()
    assert h.out == [(b"a", b"1000"), (b"b", b"2000")]
    h.restart()  # 3000 is pending in the state
    h.chain.tick(5_000)  # overdue after the restore: it fires, once
    h.chain.tick(6_000)
    h.flush()
    assert h.out[2:] == [(b"a", b"3000")]
    assert [c[2] for c in log.calls if c[0] == "timer"] == [1000, 2000, 3000]
    assert h.backend.data == {}


def test_processing_time_quiet_tick_fires_without_output() -> None:
    h, _ = _clocked()
    h.records([("a", {"set": [1_000, 3_000]}, 0)])
    h.chain.tick(2_000, quiet=True)
    h.flush()
    h.chain.tick(4_000)
    h.flush()
    assert h.out == [(b"a", b"3000")]


def test_an_untimed_pipeline_without_timers_has_no_ticks() -> None:
    compiled, stage = _stage(lambda s: s.process(lambda v, st: [v]), timed=False)
    chain = StageChain(compiled, stage, 0, DictBackend(), {})
    assert not chain.ticks and not compiled.timed
    assert chain.watermark == NO_WATERMARK


def test_event_time_timers_make_the_pipeline_timed() -> None:
    p = Pipeline()
    keyed = p.source("in", value="json").key_by(lambda v: v["k"])
    keyed.process(track, on_timer=expired).sink("out")
    compiled = plan(p)
    assert compiled.timed and all(s.timed for s in compiled.stages)


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (
            lambda s: s.count().process(track, on_timer=expired),
            "event-time timers need event time",
        ),
        (lambda s: s.process(track, processing_time=True), "needs on_timer"),
        (lambda s: s.window(size_ms=5).process(track, on_timer=expired), "on windows"),
        (lambda s: s.process(track, on_timer=3), "expected a function"),
    ],
)
def test_timer_pipelines_that_cannot_run(build: Any, error: str) -> None:
    p = Pipeline()
    keyed: KeyedStream[Any, Any] = p.source("in", value="json").key_by(lambda v: v["k"])
    with pytest.raises(PipelineError, match=error):
        build(keyed).sink("out")
        plan(p)


@pytest.mark.parametrize("seed", range(6))
def test_timer_output_into_a_window_downstream_is_never_late(seed: int) -> None:
    """Timers (some set behind the watermark) emit into a shuffle and a window downstream,
    with checkpoints forwarding the upstream watermark and restarts: nothing is late there,
    and every timer fired once."""

    def arm(value: dict[str, Any], state: Any) -> list[Any]:
        state.timers.set(state.timestamp + value["i"] % 7 * 500 - 1000)
        return []

    compiled, up, down = _chained(
        lambda s: s.process(arm, on_timer=lambda at, state: [1]), lambda s: s.window(1000).sum()
    )
    c = Chained(compiled, up, down)
    items = _timed_stream(seed, 0)
    _timed_drive(c, items, seed)
    assert c.up.late == [] and c.down.late == []
    timers = {(k, ts + v["i"] % 7 * 500 - 1000) for k, v, ts in items}
    assert sum(int(v) for _, v in c.down.out) == len(timers)
    assert not c.up.backend.data and not c.down.backend.data


def test_a_window_process_state_has_the_key_and_timestamp_too() -> None:
    seen: list[tuple[Any, int]] = []

    def look(value: Any, state: Any) -> list[Any]:
        seen.append((state.key, state.timestamp))
        return []

    compiled, stage = _stage(lambda s: s.window(size_ms=100).process(look))
    h = Harness(compiled, stage)
    h.records([("a", {}, 150), ("\x00[1]", {}, 170)])
    assert seen == [("a", 150), ([1], 170)]
