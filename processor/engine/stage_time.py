"""Event time in a stage's chain: the watermark each window and event-time timer process
sees (`mark_into`), what a rise of the task's watermark fires (`advance`: each such operator's
own ``advance``, in graph order), and what the wall clock fires (`tick`).

A window's results come after the watermark that passes their event time, so what a window
feeds, in the stage or through a shuffle, sees a watermark held back to what the window may
still emit: `windows_before` finds, once per node, the windows it is held back by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.api.ops import event_time
from processor.api.streams import Node
from processor.engine import process_op, ttl
from processor.engine.expiry import Expiry, ttl_prefix
from processor.engine.state_keys import state_prefix
from processor.engine.timers import ProcessTimers, timers_prefix
from processor.engine.windows import JoinOperator, WindowOperator
from processor.plan.stages import Stage

if TYPE_CHECKING:
    from processor.engine.chain import StageChain

# What keeps timers in state, rebuilt after a restore (`StageChain.timed_operators`).
TimedOperator = WindowOperator | JoinOperator | ProcessTimers | Expiry


def mark_into(chain: StageChain, node: Node) -> int:
    """The watermark of ``node``'s input: of the windows before it (more than one through a
    merge), or the task's."""
    before = chain._before[node]
    if before is None:
        return chain._watermark
    return min(
        chain._watermark if w is None else chain._windows[w].output_mark(chain._marks[w])
        for w in before
    )


def advance(chain: StageChain, watermark: int, quiet: bool) -> None:
    """See `StageChain.advance`."""
    before, chain._watermark = chain._watermark, watermark
    dead = len(chain.dead)
    if chain._expiry:  # first: what the windows and timers below update is updated under it
        ttl.by_watermark(chain, before, watermark, quiet)
    if chain.floors is not None and watermark >= chain.floors.highest:
        chain.inherit(None)  # passed: every key's lateness is the task's own again
    if chain._join is not None:
        chain._join.fire(watermark)
    for op in chain._fired:
        # Only now: the results of the windows before it came under its old watermark.
        node = op.node
        before, mark = chain._marks[node], mark_into(chain, node)
        chain._marks[node] = mark
        op.advance(mark, before, quiet)
    if quiet:
        del chain.dead[dead:]  # dead-lettered already, when the watermark first came


def tick(chain: StageChain, now_ms: int, quiet: bool) -> None:
    """See `StageChain.tick`."""
    chain._clock = now_ms  # for the wall-clock TTLs, at the flush that follows
    dead = len(chain.dead)
    for node, timers in chain._timers.items():
        if timers.processing_time:
            low = mark_into(chain, node) if node.timed else None
            process_op.fire_timers(chain, node, now_ms, low, quiet, event_time=False)
    if quiet:
        del chain.dead[dead:]  # dead-lettered already, when the clock first came


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
        if parent.windowed and id(parent) in members:
            found.append(parent)
        elif parent is stage.head or id(parent) not in members:
            found.append(None)  # the stage's input (another stage's node: another task's)
        else:
            stack.extend(parent.inputs)
    if all(w is None for w in found):
        return None
    return list(dict.fromkeys(found))


def stamped(chain: StageChain, head: Node, values: list[Any]) -> list[tuple[int, Any]]:
    """(event time, value) by the source's timestamp function; a failure is dead."""
    fn = head.timestamp_fn
    assert fn is not None
    items = []
    for value in values:
        try:
            ts = event_time(fn, value)
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            chain._dead(head, exc, value)
            continue
        items.append((ts, value))
    return items


def timed_operators(chain: StageChain) -> dict[bytes, TimedOperator]:
    """See `StageChain.timed_operators`."""
    ops: list[WindowOperator | JoinOperator] = list(chain._windows.values())
    if chain._join is not None:
        ops.append(chain._join)
    found: dict[bytes, TimedOperator] = {state_prefix(op.node): op for op in ops}
    for node, timers in chain._timers.items():
        found[timers_prefix(node)] = timers
    for node, expiry in chain._expiry.items():
        found[ttl_prefix(node)] = expiry
    return found
