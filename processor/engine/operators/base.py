"""What every compiled operator of a stage is (`Operator`), and the ones that run no code of
their own: the head of a stage, a union (merge, loop) and a window marker pass their input on
(`Pass`); `IntoMerge` converts one input of a union whose items have another form; `Unknown`
refuses a node no operator runs, on its first batch, as the interpreter did before.
"""

from __future__ import annotations

from typing import Any

from processor.api.streams import Node
from processor.engine import metachain
from processor.engine.context import StageContext


class Operator:
    """One node of a stage, compiled once when its `StageChain` is built: `apply` takes a
    batch from an input, `emit` hands what it makes to ``children`` (the compiled operators
    of the node's children in the stage). ``ctx``: what the stage's operators share (state
    reads, dead records, output: `processor.engine.context`). Like Flink's stream
    operators, one class per kind of node; which class, and which variant of it (keyed,
    timed, with metadata), is decided from the graph at compile time, so that no batch is
    dispatched on its node's kind."""

    __slots__ = ("children", "ctx", "node")

    def __init__(self, ctx: StageContext, node: Node) -> None:
        self.ctx = ctx
        self.node = node
        self.children: list[Operator] = []

    def apply(self, batch: list[Any], quiet: bool) -> None:
        """A non-empty batch from an input; quiet: a replay (state only, nothing emitted
        except what later operators keep in state)."""
        raise NotImplementedError

    def emit(self, batch: list[Any], quiet: bool) -> None:
        """``batch`` on to every child (nothing for an empty one)."""
        if batch:
            for child in self.children:
                child.apply(batch, quiet)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.node.name}>"


class Pass(Operator):
    """A node whose input is its output: a stage's head, a merge or loop (every input's items
    on to its children), a window (it marks the operators under it as per-window)."""

    __slots__ = ()

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(batch, quiet)


class IntoMerge(Operator):
    """The edge from ``sender`` into a union whose items have another form (one carries
    metadata, the other not: `processor.engine.metachain.into_merge`)."""

    __slots__ = ("sender", "union")

    def __init__(self, ctx: StageContext, sender: Node, union: Operator) -> None:
        super().__init__(ctx, union.node)
        self.sender, self.union = sender, union

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.union.apply(metachain.into_merge(self.sender, self.node, batch), quiet)


class Unknown(Operator):
    """A node of a kind no operator runs: an error when a batch reaches it."""

    __slots__ = ()

    def apply(self, batch: list[Any], quiet: bool) -> None:
        raise ValueError(f"unknown operator {self.node!r}")
