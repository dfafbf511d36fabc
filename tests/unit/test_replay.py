"""The replay after a fallback restore, in a stage chain without Kafka: an older snapshot plus
the epochs from it to the committed checkpoint, run quietly, must leave every operator's state
as the first run left it, and output nothing. Each pipeline here puts an order-sensitive
operator (a running ``reduce``, a first-sight ``process``) after an aggregation, a window or a
join in the same stage: the operator after is the one a replay forgets."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from processor import Pipeline
from processor.api.streams import KeyedStream
from processor.engine.chain import StageChain
from processor.plan.stages import Plan, Stage, plan
from tests.unit.test_chain import DictBackend, restored

# An epoch is a list of steps: ("records", items, side), ("advance", watermark), ("flush",)
# (an early flush, where the first run's buffers outgrew flush_keys). It ends with a flush.
Step = tuple[Any, ...]
Epoch = list[Step]


@dataclass
class Run:
    """One keyed task's chain over a dict backend, epoch by epoch."""

    compiled: Plan
    stage: Stage
    backend: DictBackend = field(default_factory=DictBackend)
    out: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    chain: StageChain | None = None

    def new_chain(self) -> StageChain:
        return StageChain(self.compiled, self.stage, 0, self.backend, {}, late_topic="late")

    def epoch(self, steps: Epoch, quiet: bool) -> None:
        chain = self.chain = self.chain or self.new_chain()
        for step in steps:
            if step[0] == "records":
                chain.shuffled([list(item) for item in step[1]], quiet, step[2])
            elif step[0] == "advance":
                chain.advance(step[1], quiet)
            else:
                chain.flush(quiet)
        chain.flush(quiet)
        for records in chain.take_sinks().values():
            self.out += records
        if quiet:
            assert not chain.take_dead()


def first_run_and_replay(compiled: Plan, stage: Stage, epochs: list[Epoch]) -> tuple[Run, Run]:
    """The first run of ``epochs``; and a replay that restores the snapshot of the first
    epoch's end, then runs the others quietly."""
    first = Run(compiled, stage)
    first.epoch(epochs[0], quiet=False)
    assert first.chain is not None
    snapshot = dict(first.backend.data)
    replay = Run(compiled, stage, DictBackend())
    replay.backend.data.update(snapshot)
    replay.chain = restored(first.chain, replay.new_chain, snapshot)
    for steps in epochs[1:]:
        first.epoch(steps, quiet=False)
    for steps in epochs[1:]:
        replay.epoch(steps, quiet=True)
    return first, replay


def _keyed(
    shape: Callable[[KeyedStream[Any, Any]], Any], timed: bool = False
) -> tuple[Plan, Stage]:
    p = Pipeline()
    if timed:
        source = p.source("in", value="json", timestamp=lambda v: v["ts"])
        keyed = source.key_by(lambda v: v["k"])
    else:
        keyed = p.source("in").key_by(lambda w: w)
    shape(keyed).sink("out")
    compiled = plan(p)
    return compiled, compiled.stages[1]


def first_over(threshold: int) -> Callable[[Any, Any], list[Any]]:
    """A ``process`` that emits once per key, when its input first reaches ``threshold``."""

    def fire(value: Any, state: Any) -> list[Any]:
        if state.get() is None and value >= threshold:
            state.set(value)
            return [value]
        return []

    return fire


def _words(seed: int, epochs: int = 5, early: bool = False) -> list[Epoch]:
    rng = random.Random(seed)
    out: list[Epoch] = []
    for _ in range(epochs):
        steps: Epoch = []
        for _ in range(rng.randrange(1, 6)):
            steps.append(("records", [[rng.choice("abcdef"), 1] for _ in range(20)], 0))
            if early and rng.random() < 0.5:
                steps.append(("flush",))
        out.append(steps)
    return out


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_reduce_after_a_count_is_rebuilt_by_the_replay(seed: int, early: bool) -> None:
    compiled, stage = _keyed(lambda s: s.count().reduce(lambda a, b: a + b))
    first, replay = first_run_and_replay(compiled, stage, _words(seed, early=early))
    assert replay.out == []
    assert replay.backend.data == first.backend.data


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_first_sight_process_after_a_count_is_rebuilt(seed: int, early: bool) -> None:
    compiled, stage = _keyed(lambda s: s.count().process(first_over(30)))
    epochs = _words(seed, early=early)
    first, replay = first_run_and_replay(compiled, stage, epochs)
    assert replay.out == []
    assert replay.backend.data == first.backend.data
    # What comes after the replay fires no key a second time, as after the first run.
    more: Epoch = [("records", [[w, 1] for w in "abcdef" * 40], 0)]
    before = len(first.out)
    first.epoch(more, quiet=False)
    replay.epoch(more, quiet=False)
    assert replay.out == first.out[before:]
    fired = [k for k, _ in first.out]
    assert len(fired) == len(set(fired))


def _timed_epochs(seed: int, sides: int = 1) -> list[Epoch]:
    rng = random.Random(seed)
    out: list[Epoch] = []
    t = 10_000
    for _ in range(6):
        steps: Epoch = []
        for _ in range(rng.randrange(1, 4)):
            items = []
            for _ in range(15):
                t += rng.choice((0, 20, 100))
                items.append([rng.choice("ab"), {"k": "x", "ts": t}, t])
            steps.append(("records", items, rng.randrange(sides)))
            steps.append(("advance", t - 300))
        out.append(steps)
    out[-1].append(("advance", t + 10**6))
    return out


def running(value: Any, state: Any) -> list[Any]:
    """An order-sensitive ``process``: each key's running total of its inputs."""
    total = (state.get() or 0) + value
    state.set(total)
    return [total]


def per_window(value: Any, state: Any) -> list[Any]:
    """A ``process`` per window: the window's records numbered as they come."""
    n = state.get(0) + 1
    state.set(n)
    return [n]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["count", "process"])
def test_a_process_after_a_window_is_rebuilt(seed: int, kind: str) -> None:
    def shape(s: KeyedStream[Any, Any]) -> Any:
        windowed = s.window(size_ms=500)
        return (windowed.count() if kind == "count" else windowed.process(per_window)).process(
            running
        )

    compiled, stage = _keyed(shape, True)
    first, replay = first_run_and_replay(compiled, stage, _timed_epochs(seed))
    assert replay.out == []
    assert replay.backend.data == first.backend.data


@pytest.mark.parametrize("seed", range(4))
def test_a_process_after_a_join_is_rebuilt(seed: int) -> None:
    def pairs(value: Any, state: Any) -> list[Any]:
        n = (state.get() or 0) + 1
        state.set(n)
        return [n]

    p = Pipeline()
    left = p.source("l", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    right = p.source("r", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    left.join(right, within_ms=400).process(pairs).sink("out")
    compiled = plan(p)
    first, replay = first_run_and_replay(compiled, compiled.stages[2], _timed_epochs(seed, 2))
    assert replay.out == []
    assert replay.backend.data == first.backend.data
