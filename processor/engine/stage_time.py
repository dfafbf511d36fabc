"""Event time in a stage's chain (`EventTime`): the watermark each window and event-time
timer process sees (their ``mark``: `EventTime.mark_into`), what a rise of the task's
watermark fires (`EventTime.advance`: each such operator's own ``advance``, in graph order),
and what the wall clock fires (`EventTime.tick`).

A window's results come after the watermark that passes their event time, so what a window
feeds, in the stage or through a shuffle, sees a watermark held back to what the window may
still emit: `windows_before` finds, once per node, the windows it is held back by.
"""

from __future__ import annotations

from typing import Any

from processor.api.node import PerKeyNode, SourceNode
from processor.api.ops import event_time
from processor.api.streams import Node
from processor.engine.context import StageContext
from processor.engine.expiry import Expiry, ttl_prefix
from processor.engine.floors import Floors
from processor.engine.operators import StageOperators
from processor.engine.operators.process import Process
from processor.engine.operators.windowed import Window
from processor.engine.state_keys import state_prefix
from processor.engine.time import NO_WATERMARK
from processor.engine.timers import ProcessTimers, timers_prefix
from processor.engine.ttl import Expirations
from processor.engine.windows import JoinOperator, WindowOperator
from processor.models.limits import in_range
from processor.plan.stages import Stage

# What keeps timers in state, rebuilt after a restore (`StageChain.timed_operators`).
TimedOperator = WindowOperator | JoinOperator | ProcessTimers | Expiry


class EventTime:
    """The watermarks of one task's operators (``ops``), their TTLs' expiry by the
    watermark (``ttl``) and their timers."""

    def __init__(
        self, ctx: StageContext, stage: Stage, ops: StageOperators, ttl: Expirations
    ) -> None:
        self._ctx, self._ops, self._ttl = ctx, ops, ttl
        self._watermark = NO_WATERMARK  # the task's
        self.floors: Floors | None = None  # per-key watermarks inherited from a savepoint
        self._windows = {op.node: op for op in ops.windows}
        # Of each process with on_timer: the operator.
        self._timers = {op.node: op for op in ops.processes if op.timers is not None}
        self.ticks = any(op.node.processing_time for op in self._timers.values())
        # What `advance` fires, in graph order (what one emits reaches the next one first):
        # the windows, and the processes with event-time timers.
        self._fired: list[Window | Process] = [
            op
            for op in ops.runs
            if isinstance(op, Window)
            or (isinstance(op, Process) and op.node in self._timers and not op.node.processing_time)
        ]
        # Of each window, timer process and shuffle: the windows before it in the stage
        # (None: the stage's input is its input). A window's results come after the
        # watermark that passes their event time, so the watermark of what it feeds is held
        # back (`mark_into`).
        self._before = {
            n: windows_before(n, stage) for n in [*self._windows, *self._timers, *stage.shuffles]
        }
        self._shuffles = list(stage.shuffles)

    def mark_into(self, node: Node) -> int:
        """The watermark of ``node``'s input: of the windows before it (more than one through
        a merge), or the task's."""
        before = self._before[node]
        if before is None:
            return self._watermark
        return min(self._watermark if w is None else self._windows[w].output_mark() for w in before)

    @property
    def watermark(self) -> int:
        """The task's watermark (see `StageChain.watermark`)."""
        return self._watermark

    @watermark.setter
    def watermark(self, watermark: int) -> None:
        self._watermark = watermark
        if self._ops.join is not None:
            self._ops.join.mark = watermark
        for op in self._fired:  # graph order: a window's input's window first
            op.mark = self.mark_into(op.node)

    @property
    def output_watermark(self) -> int:
        """See `StageChain.output_watermark`."""
        marks = (self.mark_into(n) for n in self._shuffles)
        return min(marks, default=self._watermark)

    def advance(self, watermark: int, quiet: bool) -> None:
        """See `StageChain.advance`."""
        before, self._watermark = self._watermark, watermark
        dead = len(self._ctx.dead)
        if self._ttl:  # first: what the windows and timers below update is updated under it
            self._ttl.by_watermark(before, watermark, quiet)
        if self.floors is not None and watermark >= self.floors.highest:
            self.inherit(None)  # passed: every key's lateness is the task's own again
        if self._ops.join is not None:
            self._ops.join.advance(watermark)
        for op in self._fired:
            # Only now: the results of the windows before it came under its old watermark.
            op.advance(self.mark_into(op.node), quiet)
        if quiet:
            del self._ctx.dead[dead:]  # dead-lettered already, when the watermark first came

    def tick(self, now_ms: int, quiet: bool) -> None:
        """See `StageChain.tick`."""
        self._ttl.clock = now_ms  # for the wall-clock TTLs, at the flush that follows
        dead = len(self._ctx.dead)
        for node, op in self._timers.items():
            if node.processing_time:
                low = self.mark_into(node) if node.timed else None
                op.fire_timers(now_ms, low, quiet, event_time=False)
        if quiet:
            del self._ctx.dead[dead:]  # dead-lettered already, when the clock first came

    def inherit(self, floors: Floors | None) -> None:
        """See `StageChain.inherit`."""
        if floors is not None and floors.highest <= self._watermark:
            floors = None
        self.floors = floors
        for op in self.timed_operators().values():
            op.floor = None if floors is None else floors.of

    def timed_operators(self) -> dict[bytes, TimedOperator]:
        """See `StageChain.timed_operators`."""
        ops: list[WindowOperator | JoinOperator] = [op.windows for op in self._windows.values()]
        if self._ops.join is not None:
            ops.append(self._ops.join.join)
        found: dict[bytes, TimedOperator] = {state_prefix(op.node): op for op in ops}
        for node, op in self._timers.items():
            assert op.timers is not None
            found[timers_prefix(node)] = op.timers
        for expiring, expiry in self._ttl.deadlines.items():
            found[ttl_prefix(expiring)] = expiry
        return found


def windows_before(node: Node, stage: Stage) -> list[Node | None] | None:
    """The nearest window aggregations or ``process`` upstream of ``node`` in ``stage``, one
    per path from the stage's input (None: a path with none); None when no path has one."""
    members = {id(n) for n in stage.nodes}
    found: list[Node | None] = []
    stack = list(node.inputs)
    seen: set[int] = set()
    while stack:
        parent = stack.pop()
        if id(parent) in seen:
            continue
        seen.add(id(parent))
        if isinstance(parent, PerKeyNode) and parent.windowed and id(parent) in members:
            found.append(parent)
        elif parent is stage.head or id(parent) not in members:
            found.append(None)  # the stage's input (another stage's node: another task's)
        else:
            stack.extend(parent.inputs)
    if all(w is None for w in found):
        return None
    return list(dict.fromkeys(found))


def stamped(ctx: StageContext, head: SourceNode, values: list[Any]) -> list[tuple[int, Any]]:
    """(event time, value) by the source's timestamp function; a failure is dead.

    The whole batch in C loops first (the function mapped, the times checked as a batch);
    should the function raise or a time not be an int in range, the batch again a record at
    a time (`stamped_each`), as the stateless operators do."""
    fn = head.timestamp_fn
    assert fn is not None
    try:
        times = list(map(fn, values))
    except Exception:  # noqa: BLE001 - find the failing records one by one
        return stamped_each(ctx, head, values)
    if times and (set(map(type, times)) != {int} or not in_range(times)):
        return stamped_each(ctx, head, values)
    return list(zip(times, values, strict=True))


def stamped_each(ctx: StageContext, head: SourceNode, values: list[Any]) -> list[tuple[int, Any]]:
    """`stamped` a record at a time: each failure a dead record."""
    fn = head.timestamp_fn
    assert fn is not None
    items = []
    for value in values:
        try:
            ts = event_time(fn, value)
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(head, exc, value)
            continue
        items.append((ts, value))
    return items
