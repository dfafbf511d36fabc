"""Timed stages in a chain, without Kafka: a window whose results come after the watermark
passed them (lateness, sessions, ``process`` windows) feeding a window or a join downstream.

Two keyed tasks' chains, moved between as the tasks do: at each checkpoint the upstream chain
is flushed, its shuffle records go into the downstream chain, then the watermark it forwards
(`StageChain.output_watermark`). Nothing downstream may be late, and the results must equal
the direct computation from the input.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from processor import Pipeline
from processor.api.node import PerKeyNode
from processor.api.ops import UNSET
from processor.api.streams import KeyedStream, WindowedStream
from processor.engine.chain import StageChain
from processor.engine.time import NO_WATERMARK, ChannelWatermarks
from processor.engine.windows import WindowOperator
from processor.models.records import decode_shuffle
from processor.plan.stages import Plan, Stage, plan
from tests.unit.test_windows import LATE, Harness

Items = list[tuple[str, Any, int]]  # (key, value, event time)
BOUND = 300  # how far behind its newest record the upstream task's watermark is


class Task(Harness):
    """One keyed task's chain over a dict backend, with its downstream shuffle."""

    def _chain(self) -> StageChain:
        shuffles = {n.name: 1 for n in self.stage.shuffles}
        return StageChain(self.compiled, self.stage, 0, self.backend, shuffles, late_topic=LATE)

    def shipped(self) -> list[list[Any]]:
        """The chain's epoch so far: sink records kept, shuffle bodies returned."""
        self.flush()
        bodies = []
        for shuffle in self.chain.shuffles.values():
            for _, raw in shuffle.take(0):
                _, body = decode_shuffle(raw)
                assert isinstance(body, list)
                bodies.append(body)
        return bodies

    def restart(self) -> None:
        """What a restore does, after a checkpoint: the held-back watermark it forwards is
        recomputed from the restored watermark."""
        assert not self.shipped(), "a restart after a checkpoint: nothing unsent"
        forwards = self.chain.output_watermark
        super().restart()
        assert self.chain.output_watermark == forwards, "recomputed from the watermark"


class Chained:
    """An upstream keyed task feeding a downstream one (channel 0; a join's right input, fed
    by the test, is channel 1)."""

    def __init__(self, compiled: Plan, up: Stage, down: Stage) -> None:
        self.up, self.down = Task(compiled, up), Task(compiled, down)
        self.marks = ChannelWatermarks(2 if down.is_join else 1)
        self.sent: int | None = None  # the upstream task's last forwarded watermark
        self.forwarded: list[int] = []

    def checkpoint(self, forward: bool = True) -> None:
        """The upstream task's flush: its records downstream, then (``forward``: at a
        checkpoint, not an early flush) its watermark if it changed."""
        for body in self.up.shipped():
            self.down.chain.shuffled(body, side=0)
        if not forward:
            return
        mark = self.up.chain.output_watermark
        assert mark <= self.up.chain.watermark
        if mark <= NO_WATERMARK or mark == self.sent:
            return
        assert self.sent is None or mark > self.sent, "a forwarded watermark went back"
        self.sent = mark
        self.forwarded.append(mark)
        self._mark(0, mark)

    def right(self, items: Items, watermark: int) -> None:
        """A join's right input: records, then that channel's watermark."""
        self.down.chain.shuffled([[k, v, ts] for k, v, ts in items], side=1)
        self._mark(1, watermark)

    def _mark(self, channel: int, time_ms: int) -> None:
        risen = self.marks.on_mark(channel, time_ms, False)
        if risen is not None:
            self.down.chain.advance(risen)


def _chained(
    first: Callable[[KeyedStream[Any, Any]], KeyedStream[Any, Any]],
    second: Callable[[KeyedStream[Any, Any]], KeyedStream[Any, Any]],
) -> tuple[Plan, Stage, Stage]:
    """``first`` on the input keyed by ``k``, then keyed by ``"all"`` into ``second``."""
    p = Pipeline()
    keyed = p.source("in", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    second(first(keyed).key_by(lambda _: "all", name="all")).sink("out")
    compiled = plan(p)
    return compiled, compiled.stages[1], compiled.stages[2]


def _stream(seed: int, lateness: int, n: int = 400) -> Items:
    """Records in roughly increasing event time, each less than ``BOUND + lateness`` ms behind
    the newest before it: behind the upstream watermark (newest - BOUND) by less than the
    lateness, so none is late upstream, but some open or join windows the watermark passed."""
    rng = random.Random(seed)
    out = []
    t = 10_000
    for i in range(n):
        t += rng.choice([0, 20, 50, 100, 400, 2500])
        ts = t - rng.randrange(BOUND + lateness)
        out.append((rng.choice("abc"), {"i": i}, ts))
    return out


def _drive(c: Chained, items: Items, seed: int) -> None:
    """Random batches into the upstream task; after each maybe its watermark rises, it
    flushes early, checkpoints (forwarding its watermark) or restarts. At the end every
    window closes."""
    rng = random.Random(seed)
    newest = NO_WATERMARK
    i = 0
    while i < len(items):
        size = rng.randrange(1, 20)
        batch = items[i : i + size]
        i += size
        c.up.chain.shuffled([[k, v, ts] for k, v, ts in batch])
        newest = max([newest, *(ts for _, _, ts in batch)])
        if rng.random() < 0.5:
            c.up.chain.advance(max(c.up.chain.watermark, newest - BOUND))
        roll = rng.random()
        if roll < 0.1:
            c.checkpoint(forward=False)
        elif roll < 0.5:
            c.checkpoint()
            if rng.random() < 0.1:
                c.up.restart()
        if rng.random() < 0.2:
            c.down.flush()
    c.up.chain.advance(newest + 10**6)
    c.checkpoint()
    c.down.flush()


def _closed(windows: dict[tuple[str, int], tuple[int, int]]) -> Counter[tuple[str, str]]:
    """The downstream ``window(1000).sum()`` of upstream results ``(key, start) -> (end,
    count)``, each at its event time end - 1, under the key ``all``."""
    sums: Counter[int] = Counter()
    for end, n in windows.values():
        at = end - 1
        sums[at - at % 1000] += n
    return Counter({(f"all@{s}", str(n)): 1 for s, n in sums.items()})


def _hopping(items: Items, size: int, slide: int) -> dict[tuple[str, int], tuple[int, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    for k, _, ts in items:
        for start in range(ts - ts % slide, ts - size, -slide):
            counts[k, start] += 1
    return {(k, s): (s + size, n) for (k, s), n in counts.items()}


def _sessions(items: Items, gap: int) -> dict[tuple[str, int], tuple[int, int]]:
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for key in {k for k, _, _ in items}:
        stamps = sorted(ts for k, _, ts in items if k == key)
        start = prev = stamps[0]
        n = 0
        for ts in stamps:
            if ts - prev >= gap:
                out[key, start] = (prev + gap, n)
                start, n = ts, 0
            prev, n = ts, n + 1
        out[key, start] = (prev + gap, n)
    return out


def _check(c: Chained, want: Counter[tuple[str, str]]) -> None:
    assert c.up.late == [] and c.down.late == [], (len(c.up.late), len(c.down.late))
    got = c.down.emitted()
    assert got == want, (sorted((got - want).items())[:3], sorted((want - got).items())[:3])
    assert not c.down.backend.data and not c.up.backend.data, "every window closed"


def _second(s: KeyedStream[Any, Any]) -> KeyedStream[Any, Any]:
    return s.window(size_ms=1000).sum()


SHAPES: dict[
    str,
    tuple[int, Callable[[KeyedStream[Any, Any]], WindowedStream[Any, Any]], Callable[[Items], Any]],
] = {
    "tumbling": (
        500,
        lambda s: s.window(size_ms=1000, lateness_ms=500),
        lambda items: _hopping(items, 1000, 1000),
    ),
    "hopping": (
        700,
        lambda s: s.window(size_ms=2000, slide_ms=500, lateness_ms=700),
        lambda items: _hopping(items, 2000, 500),
    ),
    "session": (
        1500,
        lambda s: s.window(gap_ms=1000, lateness_ms=1500),
        lambda items: _sessions(items, 1000),
    ),
}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_window_with_lateness_into_a_window_downstream(shape: str, seed: int) -> None:
    lateness, window, direct = SHAPES[shape]
    compiled, up, down = _chained(lambda s: window(s).count(), _second)
    c = Chained(compiled, up, down)
    items = _stream(seed, lateness)
    _drive(c, items, seed)
    _check(c, _closed(direct(items)))
    assert len(c.forwarded) > 5


def test_held_back_watermark_rises_at_the_next_checkpoint() -> None:
    """[1000, 2000) with 500 ms lateness: the forwarded watermark stays at 1999 (its result's
    time) while the window may still change, and moves on once it is emitted."""
    compiled, up, down = _chained(
        lambda s: s.window(size_ms=1000, lateness_ms=500).count(), _second
    )
    c = Chained(compiled, up, down)
    c.up.chain.shuffled([["a", {}, 1500]])
    c.up.chain.advance(1200)
    c.checkpoint()
    c.up.chain.advance(2300)
    c.checkpoint()
    c.up.chain.shuffled([["a", {}, 1700]])  # behind the watermark, within the lateness
    c.up.chain.advance(2400)
    c.checkpoint()
    assert c.forwarded == [999, 1999]  # at 1200 a record at 700 could still open [0, 1000)
    c.up.chain.advance(2600)  # [1000, 2000) emitted; [2000, 3000) takes records from 2100 on
    c.checkpoint()
    assert c.forwarded == [999, 1999, 2600]
    c.up.chain.advance(10_000)
    c.checkpoint()
    c.down.flush()
    assert c.down.emitted() == Counter({("all@1000", "2"): 1}) and c.down.late == []


@pytest.mark.parametrize("seed", range(6))
def test_process_window_with_lateness_into_a_join(seed: int) -> None:
    """Every record of a ``process`` window is emitted at once at its window's end - 1, also
    when it came after the watermark passed that end; joined downstream with a right input."""
    lateness, within = 500, 700
    p = Pipeline()
    left = (
        p.source("l", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["k"])
        .window(size_ms=1000, lateness_ms=lateness)
        .process(lambda v, state: [v["i"]])
        .key_by(lambda i: str(i % 3), name="left")
    )
    right = p.source("r", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    left.join(right, within_ms=within).sink("out")
    compiled = plan(p)
    up, down = compiled.stages[1], compiled.stages[3]
    assert down.is_join and down.upstreams[0] is up
    c = Chained(compiled, up, down)
    items = _stream(seed, lateness)
    rng = random.Random(seed)
    # Near the left records in event time, in order (none late).
    rights = sorted(
        (
            (str(j % 3), {"r": j}, ts + rng.randrange(-600, 600))
            for j, (_, _, ts) in enumerate(items)
        ),
        key=lambda r: r[2],
    )
    newest, right_newest, at, i = NO_WATERMARK, NO_WATERMARK, 0, 0
    while i < len(items):
        size = rng.randrange(1, 4)
        batch = items[i : i + size]
        i += size
        c.up.chain.shuffled([[k, v, ts] for k, v, ts in batch])
        newest = max([newest, *(ts for _, _, ts in batch)])
        c.up.chain.advance(max(c.up.chain.watermark, newest - BOUND))
        if rng.random() < 0.8:
            c.checkpoint()
            if rng.random() < 0.1:
                c.up.restart()
        # The right input runs ahead: the join's watermark is the left one's.
        while at < len(rights) and rights[at][2] < newest + rng.randrange(1000):
            right_newest = max(right_newest, rights[at][2])
            c.right([rights[at]], right_newest - BOUND)
            at += 1
    c.right(rights[at:], 10**9)
    c.up.chain.advance(10**9)
    c.checkpoint()
    c.down.flush()
    emitted_at = {v["i"]: ts - ts % 1000 + 999 for _, v, ts in items}
    want = Counter(
        (str(i % 3), json.dumps([i, rv], separators=(",", ":")))
        for i, lt in emitted_at.items()
        for k, rv, rt in rights
        if k == str(i % 3) and abs(lt - rt) <= within
    )
    assert c.up.late == [] and c.down.late == [], (len(c.up.late), len(c.down.late))
    assert c.down.emitted() == want and sum(want.values()) > 200


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("first", ["count", "process"])
def test_window_into_a_window_in_one_stage(first: str, seed: int) -> None:
    """A window with lateness into a window in the same stage: the second one takes the
    first's results under the first's held-back watermark, and closes by it, not by the
    task's."""
    p = Pipeline()
    window = (
        p.source("in", value="json", timestamp=lambda v: v["ts"])
        .key_by(lambda v: v["k"])
        .window(size_ms=1000, lateness_ms=500)
    )
    (
        (window.count() if first == "count" else window.process(lambda v, state: [1]))
        .window(size_ms=1000)
        .sum()
        .sink("out")
    )
    compiled = plan(p)
    task = Task(compiled, compiled.stages[1])
    items = _stream(seed, 500)
    rng = random.Random(seed)
    newest = NO_WATERMARK
    for i in range(0, len(items), 7):
        batch = items[i : i + 7]
        task.chain.shuffled([[k, v, ts] for k, v, ts in batch])
        newest = max([newest, *(ts for _, _, ts in batch)])
        if rng.random() < 0.5:
            task.chain.advance(max(task.chain.watermark, newest - BOUND))
        if rng.random() < 0.3:
            task.restart()
    task.chain.advance(10**9)
    task.flush()
    # The second window is per key "k@start": the first window's count, or its emits.
    counts = _hopping(items, 1000, 1000)
    want = Counter({(f"{k}@{s}@{s}", str(n)): 1 for (k, s), (_, n) in counts.items()})
    assert task.late == [] and task.emitted() == want


SHAPES_SMALL: dict[str, Callable[[KeyedStream[Any, Any]], KeyedStream[Any, Any]]] = {
    "tumbling": lambda s: s.window(size_ms=10, lateness_ms=7).count(),
    "tumbling, no lateness": lambda s: s.window(size_ms=10).count(),
    "hopping": lambda s: s.window(size_ms=10, slide_ms=4, lateness_ms=7).count(),
    "hopping, no lateness": lambda s: s.window(size_ms=9, slide_ms=3).count(),
    "session": lambda s: s.window(gap_ms=5, lateness_ms=6).count(),
    "process": lambda s: s.window(size_ms=10, lateness_ms=12).process(lambda v, st: [v]),
    "process, hopping": lambda s: s.window(size_ms=9, slide_ms=3, lateness_ms=5).process(
        lambda v, st: [v]
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES_SMALL))
def test_output_mark_is_the_earliest_result_still_possible(shape: str) -> None:
    """Against brute force: at each watermark, a record at any time the window still takes;
    the earliest event time of the results it makes is the held-back watermark."""
    p = Pipeline()
    SHAPES_SMALL[shape](p.source("in", timestamp=len).key_by(str)).sink("out")
    compiled = plan(p)
    (node,) = [n for n in compiled.stages[1].nodes if isinstance(n, PerKeyNode) and n.windowed]
    held = WindowOperator(node, lambda _: UNSET, lambda *_: None).output_mark
    for watermark in range(-25, 25):
        times: list[int] = []
        for ts in range(watermark - 40, watermark + 15):
            op = WindowOperator(node, lambda _: UNSET, lambda *_: None)
            late: list[Any] = []
            out = op.add([(("a", ts), "v")], watermark, late)
            out += op.fire(10**6)
            times += [t for (_, t), _ in out]
        assert times, "some records are not late"
        assert held(watermark) == min(watermark, *times), watermark
