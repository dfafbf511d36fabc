"""The operators that keep state per key: the aggregations (count, sum, reduce, aggregate;
`Aggregate` per checkpoint, `PerRecordAggregate` with ``emit="record"``), ``process`` and the
per-window ones (`Window`: an aggregation or ``process`` under a window).

Their input is keyed, ``(key text, value)`` (with the time, ``((key text, time), value)``,
where they keep it: ``process`` and windows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from processor.pipeline import aggregation, process_op, sink_batch
from processor.pipeline.api import Node
from processor.pipeline.operators.base import Operator
from processor.pipeline.per_record import PerRecord
from processor.pipeline.windows import Item, WindowOperator

if TYPE_CHECKING:
    from processor.pipeline.chain import StageChain


class Aggregate(Operator):
    """An aggregation with ``emit="checkpoint"``: each key's latest value of the epoch in
    the chain's dirty map (`processor.pipeline.aggregation.fold`), emitted at `flush`."""

    __slots__ = ("add", "fold")

    def __init__(
        self, chain: StageChain, node: Node, fold: Callable[[Any, Any], Any], add: str | None
    ) -> None:
        """``add``: "count" or "sum", folded inline (no call per value: word count's path)."""
        super().__init__(chain, node)
        self.fold, self.add = fold, add

    def apply(self, batch: list[Any], quiet: bool) -> None:
        aggregation.fold(self.chain, self.node, batch, quiet, self.fold, self.add)


class PerRecordAggregate(Operator):
    """An aggregation with ``emit="record"`` (`processor.pipeline.per_record`): an update per
    record, on at once as ``process``'s output; quietly in a replay (state only downstream
    too)."""

    __slots__ = ("latest",)

    def __init__(self, chain: StageChain, node: Node, latest: PerRecord) -> None:
        super().__init__(chain, node)
        self.latest = latest

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(self.latest.add(batch), quiet)


class Process(Operator):
    """``process`` (not per window): record by record with a state handle per key
    (`processor.pipeline.process_op`); its output flows on at once, keeping the time."""

    __slots__ = ()

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(process_op.process_batch(self.chain, self.node, batch), quiet)


class Window(Operator):
    """An aggregation or ``process`` per window (`processor.pipeline.windows`): records go
    into their windows at once; what they close (and what the watermark closes, in `advance`)
    flows on. Records behind the watermark are late (`sink_batch.late`)."""

    __slots__ = ("windows",)

    def __init__(self, chain: StageChain, node: Node, windows: WindowOperator) -> None:
        super().__init__(chain, node)
        self.windows = windows

    def apply(self, batch: list[Any], quiet: bool) -> None:
        late: list[Item] = []
        out = self.windows.add(batch, self.chain._marks[self.node], late)
        sink_batch.late(self.chain, self.node, late, quiet)
        if not quiet:
            self.emit(out, quiet)
