"""The items a shuffle carries, on both of its sides, as a stage's operators see them.

Into it: a ``key_by`` hands its `ShuffleOut` (`shuffle_out.py`) each record's key and value,
and in a timed pipeline its event time (`processor.engine.operators.stateless.KeyByTimed`).
Out of it, in the keyed stage that reads it (`into_stage`), a decoded shuffle record's body
is one of:

- ``{key text: partial}``: partials pre-aggregated upstream, merged by the stage's combiner;
- ``[[key text, value], ...]``: records, which unpack like the chain's ``(key, value)`` items;
- ``[[key text, value, time], ...]`` in a timed pipeline, into ``((key text, time), value)``
  items (of a join: into its left or right input);
- with record metadata, what `processor.engine.metachain.from_shuffle` reads.
"""

from __future__ import annotations

from typing import Any

from processor.engine import metachain
from processor.engine.operators import StageOperators
from processor.engine.windows import Item
from processor.plan.stages import Stage


def into_stage(
    stage: Stage,
    ops: StageOperators,
    body: dict[str, Any] | list[list[Any]],
    quiet: bool,
    side: int,
) -> None:
    """One decoded shuffle record's body through the operators ``ops`` of a task of the
    keyed ``stage`` (``side``: of a join, 1 for a record of its right input)."""
    head = ops.by_node[stage.head]
    if isinstance(body, dict):
        assert ops.combiner is not None, "combined records for a stage that has no combiner"
        aggregate, merge = ops.combiner
        aggregate.combine(body, quiet, merge)
    elif stage.head.meta:
        head.emit(metachain.from_shuffle(body), quiet)
    elif stage.timed:
        items: list[Item] = [((t, ts), v) for t, v, ts in body]
        if ops.join is not None:
            ops.join.add(side, items, quiet)
        else:
            head.emit(items, quiet)
    else:
        # [key text, value] lists, as decoded: they unpack like the (key, value) items.
        head.emit(body, quiet)
