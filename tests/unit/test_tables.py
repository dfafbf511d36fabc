"""``KeyedStream.regroup`` (`processor.api.tables`) through `processor.testing`: a keyed
stream read as a table, its rows grouped anew and aggregated with retractions. A key moving
between groups, a group emptied, repeated equal updates, a value changed in place upstream,
and many keys under several layouts against a direct computation."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import pytest

from processor import Aggregator, KeyedStream, Pipeline, PipelineError
from processor.api import tables
from processor.plan.stages import plan
from processor.testing import Driver, run

# (tasks per keyed stage, source partitions, records between checkpoints)
LAYOUTS = [(1, 1, None), (1, 1, 1), (3, 2, 7), (2, 3, 50)]


def _rows(p: Pipeline) -> KeyedStream[Any, Any]:
    """The table: source ``rows`` of ``{"k": key, "v": value}``, each the key's new value
    (``"v": None`` deletes the key)."""
    return p.source("rows", value="json").key_by(lambda r: r["k"]).map(lambda r: r["v"])


def _drive(p: Pipeline, rows: list[tuple[Any, Any]], layout: Any = (1, 1, None)) -> Driver:
    partitions, source_partitions, every = layout
    driver = Driver(p, partitions, source_partitions, every)
    for k, v in rows:  # keyed by k: a key's rows stay in order in one source partition
        driver.send("rows", {"k": k, "v": v}, key=str(k))
    driver.finish()
    assert driver.dead_records() == []
    return driver


def _lot(_car: Any, car: dict[str, Any]) -> str:
    lot: str = car["lot"]
    return lot


def test_a_key_moving_between_groups_leaves_one_and_joins_the_other() -> None:
    p = Pipeline()
    cars = _rows(p)
    cars.regroup(_lot, Aggregator.count(), emit="record").sink("count")
    cars.regroup(_lot, Aggregator.avg(lambda c: c["kg"]), emit="record").sink("avg")
    moves = [
        (1, {"lot": "A", "kg": 1000}),
        (2, {"lot": "A", "kg": 2000}),
        (1, {"lot": "B", "kg": 1000}),  # car 1 moves from A to B
        (2, {"lot": "B", "kg": 2000}),  # and car 2: A empty
    ]
    driver = _drive(p, moves)
    assert driver.output("count") == [
        ("A", 1), ("A", 2), ("A", 1), ("B", 1), ("A", 0), ("B", 2)
    ]  # fmt: skip
    assert driver.output("avg") == [
        ("A", 1000.0), ("A", 1500.0), ("A", 2000.0), ("B", 1000.0), ("A", None), ("B", 1500.0)
    ]  # fmt: skip


def test_an_update_within_its_group_is_one_change() -> None:
    """A key's new value in the same group: the old one taken back and the new one added in
    one update, never a value of the group without the key."""
    p = Pipeline()
    _rows(p).regroup(lambda k, v: v % 2, Aggregator.sum(), emit="record").sink("sums")
    driver = _drive(p, [("a", 5), ("b", 1), ("a", 7), ("a", 8)])
    assert driver.output("sums") == [("1", 5), ("1", 6), ("1", 8), ("1", 1), ("0", 8)]


def test_a_group_emptied_by_deletions() -> None:
    """``None`` deletes a key: out of its group; the group's count and sum are then 0, its
    average None; a key deleted twice, or never there, changes nothing."""
    p = Pipeline()
    table = _rows(p)
    table.regroup(lambda k, v: "g", Aggregator.count(), emit="record").sink("count")
    table.regroup(lambda k, v: "g", Aggregator.sum(), emit="record").sink("sum")
    table.regroup(lambda k, v: "g", Aggregator.avg()).sink("avg")  # per checkpoint
    driver = _drive(p, [("a", 3), ("b", 4), ("a", None), ("a", None), ("c", None), ("b", None)])
    assert driver.output("count") == [("g", 1), ("g", 2), ("g", 1), ("g", 0)]
    assert driver.output("sum") == [("g", 3), ("g", 7), ("g", 4), ("g", 0)]
    assert driver.output("avg") == [("g", None)]
    driver = _drive(p, [("a", 3), ("a", None), ("a", 5)])  # deleted, then back
    assert driver.output("count") == [("g", 1), ("g", 0), ("g", 1)]
    assert driver.output("sum") == [("g", 3), ("g", 0), ("g", 5)]


def test_repeated_equal_updates_change_nothing() -> None:
    """A key's value again, unchanged: no change, no update downstream."""
    p = Pipeline()
    _rows(p).regroup(lambda k, v: "g", Aggregator.sum(), emit="record").sink("sum")
    driver = _drive(p, [("a", 5), ("a", 5), ("b", 5), ("a", 5), ("a", 6), ("a", 6)])
    assert driver.output("sum") == [("g", 5), ("g", 10), ("g", 11)]


def test_a_changelog_that_repeats_a_value_emits_once() -> None:
    """A per-checkpoint reduce emits each key a record touched, changed or not."""
    p = Pipeline()
    auctions = p.source("bids", value="json").key_by(lambda b: b["auction"])
    highest = auctions.map(lambda b: b["price"]).reduce(max)  # an update per checkpoint
    highest.regroup(lambda auction, price: "all", Aggregator.sum(), emit="record").sink("sum")
    driver = Driver(p, checkpoint_every=1)
    for price in [5, 5, 3, 5, 9, 9]:
        driver.send("bids", {"auction": 1, "price": price})
    driver.finish()
    assert driver.output("sum") == [("all", 5), ("all", 9)]


class _KeyState:
    """The ``state`` a ``process`` gets, for one key, in memory (the changes function is pure
    logic over it)."""

    def __init__(self, key: Any) -> None:
        self.key, self.value = key, None

    def get(self, default: Any = None) -> Any:
        return default if self.value is None else self.value

    def set(self, value: Any) -> None:
        self.value = value

    def delete(self) -> None:
        self.value = None


def test_a_value_changed_in_place_upstream_is_still_taken_back() -> None:
    """A function upstream that emits an object and later changes it in place (a
    ``process`` emitting its cached state, across batches of an epoch): the regroup keeps a
    copy, or it would find the new value equal to the one it kept and take nothing back."""
    changes = tables._changes(lambda key, value: value["g"])
    state = _KeyState("a")
    value = {"g": 1, "n": 1}
    assert changes(value, state) == [[1, tables.ADD, {"g": 1, "n": 1}]]
    value["n"] = 2
    assert changes(value, state) == [[1, tables.REPLACE, {"g": 1, "n": 1}, {"g": 1, "n": 2}]]
    value["g"] = 2
    assert changes(value, state) == [
        [1, tables.SUBTRACT, {"g": 1, "n": 2}], [2, tables.ADD, {"g": 2, "n": 2}]
    ]  # fmt: skip
    assert changes(None, state) == [[2, tables.SUBTRACT, {"g": 2, "n": 2}]]
    assert state.value is None


def _multiset() -> Aggregator[Any, dict[str, int]]:
    def add(acc: dict[str, int], v: dict[str, Any]) -> dict[str, int]:
        return {**acc, str(v["x"]): acc.get(str(v["x"]), 0) + 1}

    def subtract(acc: dict[str, int], v: dict[str, Any]) -> dict[str, int]:
        left = {**acc, str(v["x"]): acc[str(v["x"])] - 1}
        return {x: n for x, n in left.items() if n}

    return Aggregator({}, add, subtract)


def _group(_k: Any, v: dict[str, Any]) -> int:
    g: int = v["g"]
    return g


def _updates(seed: int, n: int = 1500) -> list[tuple[Any, Any]]:
    """Random rows over 120 keys and 9 groups: new keys, updates within a group and across,
    equal updates, deletions (some of absent keys)."""
    rng = random.Random(seed)
    out: list[tuple[Any, Any]] = []
    for _ in range(n):
        key = rng.choice([f"k{rng.randrange(100)}", rng.randrange(20)])  # str and int keys
        if rng.random() < 0.12:
            out.append((key, None))
        else:
            out.append((key, {"g": rng.randrange(9), "x": rng.randrange(-50, 1000)}))
    return out


def _direct(rows: list[tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
    """Per aggregation, the last value per group (the sink's key) of the final table; every
    group a key was ever in, an empty one included."""
    table: dict[Any, dict[str, int]] = {}
    touched: set[int] = set()
    for key, value in rows:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
            touched.add(value["g"])
    members: dict[int, list[int]] = defaultdict(list)
    for value in table.values():
        members[value["g"]].append(value["x"])
    out: dict[str, dict[str, Any]] = {"count": {}, "sum": {}, "avg": {}, "bag": {}}
    for g in touched:
        xs = members.get(g, [])
        out["count"][str(g)] = len(xs)
        out["sum"][str(g)] = sum(xs)
        out["avg"][str(g)] = sum(xs) / len(xs) if xs else None
        out["bag"][str(g)] = {str(x): n for x, n in Counter(xs).items()}
    return out


@pytest.mark.parametrize("emit", ["checkpoint", "record"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", [1, 2])
def test_many_keys_end_at_a_direct_computation(seed: int, layout: Any, emit: Any) -> None:
    """Whatever the tasks, partitions and checkpoints, each group's last update is the
    aggregate of the final table's rows in it."""
    p = Pipeline()
    table = _rows(p)
    table.regroup(_group, Aggregator.count(), emit=emit).sink("count")
    table.regroup(_group, Aggregator.sum(lambda v: v["x"]), emit=emit).sink("sum")
    table.regroup(_group, Aggregator.avg(lambda v: v["x"]), emit=emit).sink("avg")
    table.regroup(_group, _multiset(), emit=emit).sink("bag")
    rows = _updates(seed)
    driver = _drive(p, rows, layout)
    want = _direct(rows)
    for what in ("count", "sum", "avg", "bag"):
        got = dict(driver.output(what))
        assert got == want[what], what


def test_per_record_updates_are_each_change_in_order() -> None:
    """With ``emit="record"``, a group's updates are its count after each change, in order:
    a key joining or leaving it, or taking a new value in it (one update, the same count)."""
    rows = _updates(3, 600)
    p = Pipeline()
    _rows(p).regroup(_group, Aggregator.count(), emit="record").sink("count")
    got: dict[str, list[int]] = defaultdict(list)
    for g, n in _drive(p, rows).output("count"):
        got[g].append(n)
    table: dict[Any, dict[str, int]] = {}
    sizes: Counter[int] = Counter()
    want: dict[str, list[int]] = defaultdict(list)

    def changed(group: int, by: int) -> None:
        sizes[group] += by
        want[str(group)].append(sizes[group])

    for key, value in rows:
        old = table.pop(key, None)
        if value is not None:
            table[key] = value
        if old == value:
            continue
        if old is None:
            changed(value["g"], 1)
        elif value is None:
            changed(old["g"], -1)
        elif old["g"] == value["g"]:
            changed(value["g"], 0)
        else:
            changed(old["g"], -1)
            changed(value["g"], 1)
    assert got == want


def test_the_ready_made_aggregators_pre_aggregate_before_the_shuffle() -> None:
    p = Pipeline()
    table = _rows(p)
    table.regroup(_group, Aggregator.avg(lambda v: v["x"]), name="avg").sink("avg")
    table.regroup(_group, _multiset(), name="bag").sink("bag")
    table.regroup(_group, Aggregator.count(), name="n", emit="record").sink("n")
    stages = {s.name: s for s in plan(p).stages}
    combiner = stages["avg"].combiner
    assert combiner is not None and combiner.name == "avg.fold"
    assert stages["bag"].combiner is None  # no merge
    assert stages["n"].combiner is None  # an update per change
    # The changes run in the table's stage, after its map.
    (table_stage,) = [s for s in plan(p).stages if any(n.name == "avg.changes" for n in s.nodes)]
    assert table_stage.head.name == "rows.key_by"


def test_names_and_what_is_refused() -> None:
    p = Pipeline()
    table = _rows(p)
    table.regroup(_group, Aggregator.count()).sink("a")
    table.regroup(_group, Aggregator.count()).sink("b")
    names = {n.name for n in p.nodes}
    assert {"rows.key_by.map.regroup", "rows.key_by.map.regroup.changes"} <= names
    assert {"rows.key_by.map.regroup-2", "rows.key_by.map.regroup-2.fold"} <= names
    with pytest.raises(PipelineError, match="expected a function"):
        table.regroup("g", Aggregator.count())  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="expected an Aggregator"):
        table.regroup(_group, max)  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="Aggregator subtract"):
        Aggregator(0, lambda a, v: a, None)  # type: ignore[arg-type]


def test_a_value_that_is_not_a_number_is_dead() -> None:
    p = Pipeline()
    _rows(p).regroup(lambda k, v: "g", Aggregator.sum()).sink("sum")
    driver = Driver(p)
    for k, v in [("a", 1), ("b", "two"), ("c", 3)]:
        driver.send("rows", {"k": k, "v": v})
    driver.finish()
    assert driver.output("sum") == [("g", 4)]
    assert len(driver.dead_records()) == 1


def test_the_doc_example_runs() -> None:
    """docs/pipelines.md's example: the average per category of each auction's top bid."""
    p = Pipeline()
    bids = p.source("bids", value="json")
    top = bids.key_by(lambda b: b["auction"]).reduce(
        lambda a, b: max(a, b, key=lambda x: x["price"])
    )
    (
        top.regroup(lambda auction, bid: bid["category"], Aggregator.avg(lambda b: b["price"]))
        .map(lambda avg, meta: {"category": meta.key, "avg_price": avg}, meta=True)
        .sink("avg-top-bid-per-category")
    )
    bid = [(1, 10, 5), (2, 10, 7), (1, 10, 9), (3, 11, 4), (2, 10, 1)]
    out = run(p, {"bids": [{"auction": a, "category": c, "price": x} for a, c, x in bid]})
    assert out == {"avg-top-bid-per-category": [
        ("10", {"category": 10, "avg_price": 8.0}), ("11", {"category": 11, "avg_price": 4.0})
    ]}  # fmt: skip
