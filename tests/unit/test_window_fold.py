"""`WindowOperator._fold_all`, the aggregation path of tumbling and hopping windows whose
size is a multiple of their slide, against `add`'s general path (taken with a savepoint
floor that holds nothing back): the same windows, late records, dead records, timers and
results, on random batches with out-of-order and late records."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from processor import Pipeline
from processor.api.node import PerKeyNode
from processor.api.ops import UNSET
from processor.api.streams import KeyedStream
from processor.api.streams import Node as StreamNode
from processor.engine.time import NO_WATERMARK
from processor.engine.windows import DELETED, Item, WindowOperator
from processor.plan.stages import plan


def _node(shape: Callable[[KeyedStream[Any, Any]], Any]) -> PerKeyNode:
    p = Pipeline()
    keyed = p.source("in", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    shape(keyed).sink("out")
    stage = plan(p).stages[1]
    node = next(n for n in stage.nodes if isinstance(n, PerKeyNode) and n.window is not None)
    return node


def _add_nonnegative(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    if b["n"] < 0:
        raise ValueError("negative")
    return {"n": a["n"] + b["n"]}


SHAPES: dict[str, Callable[[KeyedStream[Any, Any]], Any]] = {
    "tumbling count": lambda s: s.window(size_ms=1000).count(),
    "hopping count": lambda s: s.window(size_ms=1000, slide_ms=250).count(),
    "hopping count, lateness": lambda s: s.window(
        size_ms=1000, slide_ms=500, lateness_ms=700
    ).count(),
    "hopping reduce that fails": lambda s: s.window(size_ms=600, slide_ms=200).reduce(
        _add_nonnegative
    ),
    "hopping aggregate": lambda s: s.window(size_ms=900, slide_ms=300).aggregate(
        [], lambda acc, v: [*acc, v["n"]]
    ),
}


class _Run:
    def __init__(self, node: PerKeyNode, general: bool) -> None:
        self.dead: list[tuple[str, Any]] = []
        self.stored: dict[str, Any] = {}  # the flushed state, read back as from bytes
        self.op = WindowOperator(node, self._load, self._fail)
        if general:
            self.op.floor = lambda text: NO_WATERMARK  # `add`'s own loop, nothing held back
        self.late: list[Item] = []
        self.out: list[Item] = []
        self.states: list[dict[str, Any]] = []

    def _load(self, text: str) -> Any:
        return copy.deepcopy(self.stored[text]) if text in self.stored else UNSET

    def _flush(self) -> None:
        writes = self.op.take_writes()
        self.states.append(
            {t: None if v is DELETED else copy.deepcopy(v) for t, v in writes.items()}
        )
        for text, state in writes.items():
            if state is DELETED:
                self.stored.pop(text, None)
            else:
                self.stored[text] = copy.deepcopy(state)

    def _fail(self, node: StreamNode, exc: Exception, value: Any) -> None:
        self.dead.append((node.name, value))

    def step(self, batch: list[Item], watermark: int) -> None:
        assert self.op.add(batch, watermark, self.late) == []
        self.out += self.op.fire(watermark)
        self._flush()


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("seed", range(4))
def test_the_fold_path_equals_the_general_one(shape: str, seed: int) -> None:
    node = _node(SHAPES[shape])
    fast, general = _Run(node, general=False), _Run(node, general=True)
    assert fast.op.floor is None
    rng = random.Random(seed)
    watermark = NO_WATERMARK
    now = 5_000
    for _ in range(60):
        batch: list[Item] = []
        for _ in range(rng.randrange(0, 40)):
            ts = now - rng.randrange(0, 3_000, 50)  # out of order, some behind the watermark
            value = {"n": rng.choice([1, 2, 3, -1]) if "fails" in shape else rng.randrange(5)}
            batch.append(((f"k{rng.randrange(6)}", ts), value))
        for run in (fast, general):
            run.step(list(batch), watermark)
        now += rng.randrange(0, 400, 50)  # on the windows' grid: their bounds are met
        if rng.random() < 0.6:
            watermark = max(watermark, now - rng.randrange(500, 1_500, 50))
    for run in (fast, general):
        run.step([], now + 10_000)
    assert fast.out == general.out
    assert fast.late == general.late
    assert fast.dead == general.dead
    assert fast.states == general.states
    assert fast.out, "no window closed"
    assert fast.late, "no record was late"
    if "fails" in shape:
        assert fast.dead


def test_a_keys_windows_that_close_together_come_out_by_their_start() -> None:
    """The fold path opens a record's windows latest first; a watermark that closes them
    all at once still emits them earliest first, as the general path does."""
    run = _Run(_node(SHAPES["hopping count"]), general=False)
    run.step([(("k", 900), {"n": 1})], NO_WATERMARK)
    assert list(run.stored["k"]) == ["750", "500", "250", "0"]  # as the fold opened them
    run.step([], 10_000)
    assert [at for (_, at), _ in run.out] == [999, 1249, 1499, 1749]
