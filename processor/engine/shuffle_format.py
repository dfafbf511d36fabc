"""The items a shuffle carries, on both of its sides, as a stage's operators see them.

Into it: a ``key_by`` of a timed pipeline hands its `ShuffleOut` (`shuffle_out.py`) each
record's key, value and event time (`key_by_timed`; an untimed one is inline in the chain,
on word count's path). Out of it, in the keyed stage that reads it (`into_stage`), a decoded
shuffle record's body is one of:

- ``{key text: partial}``: partials pre-aggregated upstream, merged by the stage's combiner;
- ``[[key text, value], ...]``: records, which unpack like the chain's ``(key, value)`` items;
- ``[[key text, value, time], ...]`` in a timed pipeline, into ``((key text, time), value)``
  items (of a join: into its left or right input);
- with record metadata, what `processor.engine.metachain.from_shuffle` reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.api.streams import Node
from processor.engine import metachain
from processor.engine.windows import Item

if TYPE_CHECKING:
    from processor.engine.chain import StageChain


def into_stage(
    chain: StageChain, body: dict[str, Any] | list[list[Any]], quiet: bool, side: int
) -> None:
    """One decoded shuffle record's body through the keyed stage of ``chain`` (``side``: of
    a join, 1 for a record of its right input)."""
    head = chain.stage.head
    if head.meta and not isinstance(body, dict):
        chain._push(head, metachain.from_shuffle(body), quiet)
        return
    if chain.stage.timed and not isinstance(body, dict):
        items: list[Item] = [((t, ts), v) for t, v, ts in body]
        if chain._joins:
            chain._joins[0].add(side, items, quiet)
        else:
            chain._push(head, items, quiet)
        return
    if isinstance(body, dict):
        assert chain._combiner is not None, "combined records for a stage that has no combiner"
        aggregate, merge = chain._combiner
        aggregate.combine(body, quiet, merge)
    else:
        # [key text, value] lists, as decoded: they unpack like the (key, value) items.
        chain._push(head, body, quiet)


def key_by_timed(chain: StageChain, node: Node, batch: list[Any], quiet: bool) -> None:
    """key_by of items with event time: shipped uncombined with it (or combined, into a
    stage that drops it)."""
    fn = node.fn
    assert fn is not None and node.parent is not None
    keyed = node.parent.keyed
    keys: list[Any] = []
    values: list[Any] = []
    times: list[int] = []
    for first, value in batch:
        try:
            key = fn(value)
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            chain._dead(node, exc, value)
            continue
        keys.append(key)
        values.append(value)
        times.append(first[1] if keyed else first)
    if not quiet:
        chain.shuffles[node.name].add(keys, values, times=times)
