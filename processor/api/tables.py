"""An aggregation over an updating input: `KeyedStream.regroup` and its `Aggregator`.

A keyed stream read as a table holds, per key, the value of its key's last record (``None``:
the key deleted); an aggregation's output is such a changelog, one value per key, updated.
``table.regroup(by, aggregator)`` groups the table's rows anew by ``by(key, value)`` and keeps
per group an aggregate of its rows' current values, emitted as it changes: when key k goes
from ``old`` to ``new``, ``old`` is taken back (``subtract``) from the group it was added to
and ``new`` added (``add``) to ``by(k, new)``, the same group or another. This is Kafka
Streams' ``KTable.groupBy(...).aggregate(initializer, adder, subtractor)`` and what Flink SQL's
retractions do for an aggregation over an aggregation (Nexmark q4: the average per category of
each auction's highest bid, which rises as bids come).

It is a composition of the API's own operators, so that replay and recovery are those of any
pipeline (every piece of state is in the checkpoint), with no change to the engine:

- ``<name>.changes``: a ``process`` on the table's key, in the table's stage, whose state is
  each key's group and value (``[group, value]``); it turns each record into the changes of
  the groups: ``[group, +1, new]`` (a key's first value), ``[group, -1, old]`` (a key deleted,
  or moved away from ``group``), ``[group, 0, old, new]`` (a key updated within its group: one
  change, so that the group emits once, never a state with the key missing). An update equal
  to the key's value changes nothing and emits nothing.
- ``<name>``: a ``key_by`` on the group (the stage that aggregates, named after the regroup).
- ``<name>.fold``: an ``aggregate`` applying each change with ``add`` and ``subtract``; with
  ``merge`` (`Aggregator.count`, ``sum`` and ``avg`` have one) the table's stage pre-aggregates
  each epoch's changes before the shuffle, as for any ``aggregate(merge=)``.
- ``<name>.result``: a ``map`` from the accumulator to the result (``avg``'s ``sum / n``).

The memory of each key's value is state for good (as Flink's for an unbounded aggregation):
a table of many short-lived keys grows with them. Without ``name=``, the nodes are named
``<table's node>.regroup`` (``-2`` for a second regroup of the same table).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from processor.api.args import check_callable
from processor.api.node import Emit
from processor.errors import PipelineError

T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")

# A change of a group: [group, ADD, new], [group, SUBTRACT, old], [group, REPLACE, old, new].
ADD, SUBTRACT, REPLACE = 1, -1, 0


def _same(value: Any) -> Any:
    return value


class Aggregator(Generic[T, R]):
    """What `KeyedStream.regroup` keeps per group, over values ``T``: from ``initial``,
    ``add(acc, value)`` when a row joins the group or takes a new value in it,
    ``subtract(acc, value)`` when a row leaves it or gives its old value up; the group's
    value (of type ``R``) after each change is emitted, per checkpoint or per change as the
    other aggregations (``emit=``). ``subtract`` must undo ``add``: ``subtract(add(a, v), v)``
    is ``a`` again (a count, a sum, a multiset). ``merge(a, b)``, if given, combines two
    partial accumulators, each folded from ``initial`` and possibly holding more subtractions
    than additions (a negative count): it lets the table's stage pre-aggregate each epoch.

    The ready-made ones: `Aggregator.count` (rows in the group), `Aggregator.sum` and
    `Aggregator.avg` (of ``of(value)``, a number; ``avg`` of an empty group is None). A sum of
    floats taken back is exact only up to rounding (integers are exact). Per word's count,
    the number of words seen that often:

    >>> p = Pipeline()
    >>> counts = p.source("words").key_by(lambda w: w).count(emit="record")
    >>> counts.regroup(lambda word, n: n, Aggregator.count(), emit="record").sink("words-per-n")
    >>> run(p, {"words": ["a", "b", "a"]})["words-per-n"]
    [('1', 1), ('1', 2), ('1', 1), ('2', 1)]

    ("a", counted twice, left group 1 for group 2.) A keyed stream is a table too, each record
    its key's new value: per parking lot, the colours of the cars in it, a multiset:

    >>> def add(colours, car):
    ...     return {**colours, car["colour"]: colours.get(car["colour"], 0) + 1}
    >>> def subtract(colours, car):
    ...     left = {**colours, car["colour"]: colours[car["colour"]] - 1}
    ...     return {colour: n for colour, n in left.items() if n}
    >>> p = Pipeline()
    >>> cars = p.source("cars", value="json").key_by(lambda car: car["id"])
    >>> cars.regroup(lambda id, car: car["lot"], Aggregator({}, add, subtract)).sink("lots")
    >>> run(p, {"cars": [{"id": 1, "lot": "A", "colour": "red"},
    ...                  {"id": 2, "lot": "A", "colour": "red"},
    ...                  {"id": 1, "lot": "B", "colour": "red"}]})
    {'lots': [('A', {'red': 1}), ('B', {'red': 1})]}
    """

    def __init__(
        self,
        initial: R,
        add: Callable[[R, T], R],
        subtract: Callable[[R, T], R],
        merge: Callable[[R, R], R] | None = None,
    ) -> None:
        self.initial: Any = initial
        self.add: Callable[[Any, Any], Any] = check_callable(add, "Aggregator add")
        self.subtract: Callable[[Any, Any], Any] = check_callable(subtract, "Aggregator subtract")
        self.merge: Callable[[Any, Any], Any] | None = (
            None if merge is None else check_callable(merge, "Aggregator merge")
        )
        # The group's value from the accumulator (None: the accumulator itself).
        self.result: Callable[[Any], Any] | None = None

    @staticmethod
    def count() -> Aggregator[Any, int]:
        """The number of rows in the group (0 once all have left)."""
        return Aggregator(0, lambda n, _v: n + 1, lambda n, _v: n - 1, lambda a, b: a + b)

    @staticmethod
    def sum(of: Callable[[V], float] | None = None) -> Aggregator[V, float]:
        """The sum of ``of(value)`` (the value itself without ``of``) over the group's rows,
        0 when it has none; not a number: the record is dead."""
        get: Callable[[Any], Any] = _same if of is None else of
        return Aggregator(
            0,
            lambda s, v: s + _number(get(v)),
            lambda s, v: s - _number(get(v)),
            lambda a, b: a + b,
        )

    @staticmethod
    def avg(of: Callable[[V], float] | None = None) -> Aggregator[V, float | None]:
        """The mean of ``of(value)`` (the value itself without ``of``) over the group's rows,
        None when it has none."""
        get: Callable[[Any], Any] = _same if of is None else of
        mean: Aggregator[V, Any] = Aggregator(
            [0, 0],
            lambda a, v: [a[0] + 1, a[1] + _number(get(v))],
            lambda a, v: [a[0] - 1, a[1] - _number(get(v))],
            lambda a, b: [a[0] + b[0], a[1] + b[1]],
        )
        mean.result = lambda a: a[1] / a[0] if a[0] else None
        return mean


def _number(value: Any) -> float:
    if type(value) is int or type(value) is float:
        return value
    raise TypeError(f"not a number: {value!r:.80}")


def regroup(table: Any, by: Any, aggregator: Any, name: str | None, emit: Emit) -> Any:
    """``table.regroup(by, aggregator, name, emit)`` (``table`` a `KeyedStream`): the
    composition the module's docstring describes, built with the stream's own methods."""
    by = check_callable(by, "regroup(by)")
    if not isinstance(aggregator, Aggregator):
        raise PipelineError(
            f"regroup(by, aggregator): expected an Aggregator (Aggregator.count(), .sum(fn), "
            f".avg(fn) or Aggregator(initial, add, subtract)), got {type(aggregator).__name__}"
        )
    base = _free_name(table, name)
    changes = table.process(_changes(by), name=f"{base}.changes", headers=False)
    fold = changes.key_by(_group, name=base).aggregate(
        aggregator.initial,
        _fold(aggregator.add, aggregator.subtract),
        merge=aggregator.merge,
        name=f"{base}.fold",
        emit=emit,
    )
    if aggregator.result is None:
        return fold
    return fold.map(aggregator.result, name=f"{base}.result")


def _free_name(table: Any, name: str | None) -> str:
    """``name``, or the first of ``<node>.regroup``, ``-2``, ... that no node has yet."""
    if name is not None:
        return name
    taken = {node.name for node in table.graph.nodes}
    base, n = f"{table.node.name}.regroup", 1
    while any(f"{base}{suffix}" in taken for suffix in ("", ".changes", ".fold", ".result")):
        n += 1
        base = f"{table.node.name}.regroup-{n}"
    return base


def _group(change: list[Any]) -> Any:
    return change[0]


def _changes(by: Callable[[Any, Any], Any]) -> Callable[[Any, Any], list[list[Any]]]:
    """The ``process`` function of ``<name>.changes``: a row's new value in, its groups'
    changes out; the state is the row's ``[group, value]``."""

    def changes(value: Any, state: Any) -> list[list[Any]]:
        kept = state.get()
        if value is None:  # the key deleted: out of its group
            if kept is None:
                return []
            state.delete()
            return [[kept[0], SUBTRACT, kept[1]]]
        row = _as_json([by(state.key, value), value])
        if row == kept:
            return []  # the same value in the same group: nothing changes
        state.set(row)
        group, new = row
        if kept is None:
            return [[group, ADD, new]]
        if kept[0] == group:
            return [[group, REPLACE, kept[1], new]]
        return [[kept[0], SUBTRACT, kept[1]], [group, ADD, new]]

    return changes


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _as_json(row: list[Any]) -> list[Any]:
    """``row`` as the state keeps it and a restore reads it back (JSON): a copy that the
    function which emitted the value cannot change later (an accumulator or a ``process``
    state changed in place), and equal in a replay to what the first run compared."""
    if type(row[0]) in _SCALARS and type(row[1]) in _SCALARS:
        return row
    copied: list[Any] = json.loads(json.dumps(row))
    return copied


def _fold(
    add: Callable[[Any, Any], Any], subtract: Callable[[Any, Any], Any]
) -> Callable[[Any, list[Any]], Any]:
    """The ``aggregate`` function of ``<name>.fold``: a change into a group's accumulator."""

    def fold(acc: Any, change: list[Any]) -> Any:
        sign = change[1]
        if sign == ADD:
            return add(acc, change[2])
        if sign == SUBTRACT:
            return subtract(acc, change[2])
        return add(subtract(acc, change[2]), change[3])

    return fold
