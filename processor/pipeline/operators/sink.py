"""``sink``: a batch into the chain's sink records, taken by the task at flush; nothing in a
replay (its records are committed already). With the defaults through
`processor.pipeline.sink_batch.sink`, with options through its `sink_spec`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.pipeline import sink_batch
from processor.pipeline.api import Node
from processor.pipeline.operators.base import Operator

if TYPE_CHECKING:
    from processor.pipeline.chain import StageChain


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
