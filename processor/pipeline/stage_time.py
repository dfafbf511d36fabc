"""Event time in a stage's chain: the watermark each window and event-time timer process
sees (`mark_into`), what a rise of the task's watermark fires (`advance`: each such operator's
own ``advance``, in graph order), and what the wall clock fires (`tick`).

A window's results come after the watermark that passes their event time, so what a window
feeds, in the stage or through a shuffle, sees a watermark held back to what the window may
still emit: `windows_before` finds, once per node, the windows it is held back by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from processor.pipeline import process_op
from processor.pipeline.api import Node
from processor.pipeline.plan import Stage

if TYPE_CHECKING:
    from processor.pipeline.chain import StageChain


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
    chain._watermark = watermark
    dead = len(chain.dead)
    if chain.floors is not None and watermark >= chain.floors.highest:
        chain.inherit(None)  # passed: every key's lateness is the task's own again
    if chain._join is not None:
        chain._join.fire(watermark, quiet)
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
