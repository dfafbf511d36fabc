"""``sink``: a batch into the chain's sink records, taken by the task at flush; nothing in a
replay (its records are committed already). With the defaults through
`processor.engine.sink_batch.sink`, with options through its `sink_spec`.
``sink_postgres``: a batch into the epoch's rows of its table (`processor.api.postgres`),
taken by the task at the checkpoint."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from processor.api.postgres import add_rows
from processor.api.streams import Node
from processor.engine import sink_batch
from processor.engine.operators.base import Operator

if TYPE_CHECKING:
    from processor.engine.chain import StageChain


class Sink(Operator):
    """A sink (``keyed``: its items are ``(key text, value)``)."""

    __slots__ = ("keyed",)

    def __init__(self, chain: StageChain, node: Node, keyed: bool) -> None:
        super().__init__(chain, node)
        self.keyed = keyed

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if quiet:
            return
        spec = self.node.sink_spec
        if spec is None:
            sink_batch.sink(self.chain, self.node, batch, self.keyed)
        else:
            sink_batch.sink_spec(self.chain, self.node, spec, batch, self.keyed)


class PostgresRows(Operator):
    """A PostgreSQL sink: the batch's rows into ``chain.rows`` under its name."""

    __slots__ = ("dead", "keyed")

    def __init__(self, chain: StageChain, node: Node, keyed: bool) -> None:
        super().__init__(chain, node)
        self.keyed = keyed
        self.dead = partial(chain._dead, node)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if quiet:
            return
        target = self.node.postgres
        assert target is not None
        rows = self.chain.rows.setdefault(self.node.name, {})
        add_rows(target, rows, batch, self.keyed, self.dead)
