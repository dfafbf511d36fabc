"""The event-time operators with state per key and timers (`processor.engine.windows`): an
aggregation or ``process`` per window (`Window`), and the join (`Join`, the head of its
stage). Records go into their windows (or meet their partners) at once, and what closes
flows on, at once or when their input's watermark rises (``advance``, from
`processor.engine.stage_time.EventTime`, which sets their ``mark``). Records behind that
watermark are late (`processor.engine.sink_batch.late`). Each writes its changed state at
the epoch's end (``flush``).

Their input is keyed and timed: ``((key text, event time), value)``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from processor.api.node import JoinNode, PerKeyNode
from processor.engine import sink_batch
from processor.engine.context import StageContext
from processor.engine.operators.base import Operator
from processor.engine.state_keys import state_prefix
from processor.engine.time import NO_WATERMARK
from processor.engine.windows import DELETED, Item, JoinOperator, WindowOperator

Writes = dict[bytes, bytes | None]  # the epoch's state write: key -> value (None: deleted)


def _flush_timed(ctx: StageContext, op: WindowOperator | JoinOperator, writes: Writes) -> None:
    """A window's or the join's changed state into ``writes``."""
    prefix, node = state_prefix(op.node), op.node
    kept: list[tuple[str, Any]] = []
    for text, state in op.take_writes().items():
        if state is DELETED:
            writes[prefix + text.encode()] = None
        else:
            kept.append((text, state))
    for (text, _), raw in zip(kept, ctx.encode_all(node, kept), strict=True):
        if raw is not None:
            writes[prefix + text.encode()] = raw


class Window(Operator):
    """An aggregation or ``process`` per window: records go into their windows at once; what
    they close (and what the watermark closes, in `advance`) flows on. ``mark``: the
    watermark of its input."""

    __slots__ = ("mark", "windows")

    def __init__(self, ctx: StageContext, node: PerKeyNode) -> None:
        super().__init__(ctx, node)
        self.windows = WindowOperator(node, partial(ctx.load, node), ctx.fail)
        self.mark = NO_WATERMARK

    def apply(self, batch: list[Any], quiet: bool) -> None:
        late: list[Item] = []
        out = self.windows.add(batch, self.mark, late)
        sink_batch.late(self.ctx, self.node, late, quiet)
        if out:  # quietly in a replay: what follows rebuilds its state from it
            self.emit(out, quiet)

    def advance(self, mark: int, quiet: bool) -> None:
        """Its input's watermark rose to ``mark``: the windows it closed flow on."""
        self.mark = mark
        out = self.windows.fire(mark)
        if out:
            self.emit(out, quiet)

    def output_mark(self) -> int:
        """The watermark of what it emits (held back by its lateness)."""
        return self.windows.output_mark(self.mark)

    def flush(self, writes: Writes) -> None:
        """The windows' changed state into ``writes``."""
        _flush_timed(self.ctx, self.windows, writes)

    def held(self, text: str) -> Any:
        """The key's windows of this epoch (`UNSET`: not in memory; `DELETED`: deleted)."""
        return self.windows.held(text)


class Join(Operator):
    """The head of a join stage (`processor.engine.windows.JoinOperator`): records of
    either input (`add`) meet those of the other within its bound, and the pairs flow on;
    records that can meet nothing any more expire as the watermark (``mark``, the task's)
    rises."""

    __slots__ = ("join", "mark")

    def __init__(self, ctx: StageContext, node: JoinNode) -> None:
        super().__init__(ctx, node)
        self.join = JoinOperator(node, partial(ctx.load, node))
        self.mark = NO_WATERMARK

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(batch, quiet)  # what the stage's head emits: the joined pairs

    def add(self, side: int, items: list[Item], quiet: bool) -> None:
        """Items of the left (``side`` 0) or right (1) input, timed and keyed; those behind
        the watermark are late (`sink_batch.late`)."""
        late: list[Item] = []
        out = self.join.add(side, items, self.mark, late)
        sink_batch.late(self.ctx, self.node, late, quiet)
        if out:  # quietly in a replay: what follows rebuilds its state from it
            self.emit(out, quiet)

    def advance(self, mark: int) -> None:
        """The task's watermark rose to ``mark``: records that can meet nothing any more go."""
        self.mark = mark
        self.join.fire(mark)

    def flush(self, writes: Writes) -> None:
        """The join's changed state into ``writes``."""
        _flush_timed(self.ctx, self.join, writes)
