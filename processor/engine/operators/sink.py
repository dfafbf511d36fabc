"""``sink``: a batch into the stage's sink records (`processor.engine.context`), taken by the
task at flush; nothing in a replay (its records are committed already). With the defaults through
`processor.engine.sink_batch.sink`, with options through its `sink_spec`.
``sink_postgres``: a batch into the epoch's rows of its table (`processor.api.postgres`),
taken by the task at the checkpoint."""

from __future__ import annotations

from functools import partial
from typing import Any

from processor.api.node import PostgresSinkNode, SinkNode
from processor.api.postgres import add_rows
from processor.engine import sink_batch
from processor.engine.context import StageContext
from processor.engine.operators.base import Operator


class Sink(Operator):
    """A sink (``keyed``: its items are ``(key text, value)``)."""

    __slots__ = ("keyed",)
    node: SinkNode

    def __init__(self, ctx: StageContext, node: SinkNode, keyed: bool) -> None:
        super().__init__(ctx, node)
        self.keyed = keyed

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if quiet:
            return
        spec = self.node.sink_spec
        if spec is None:
            sink_batch.sink(self.ctx, self.node, batch, self.keyed)
        else:
            sink_batch.sink_spec(self.ctx, self.node, spec, batch, self.keyed)


class PostgresRows(Operator):
    """A PostgreSQL sink: the batch's rows into the context's ``rows`` under its name."""

    __slots__ = ("dead", "keyed")
    node: PostgresSinkNode

    def __init__(self, ctx: StageContext, node: PostgresSinkNode, keyed: bool) -> None:
        super().__init__(ctx, node)
        self.keyed = keyed
        self.dead = partial(ctx.fail, node)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if quiet:
            return
        target = self.node.postgres
        rows = self.ctx.rows.setdefault(self.node.name, {})
        add_rows(target, rows, batch, self.keyed, self.dead)
