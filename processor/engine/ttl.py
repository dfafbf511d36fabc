"""State TTL in a stage's chain (`Expirations`): the operators with deadlines (each owns its
`processor.engine.expiry.Expiry`, touches it as it updates keys and drops what expires from
its memory, its ``expire``), expiry by the watermark (`Expirations.by_watermark`, from
`StageChain.advance`) and at the epoch's end (`Expirations.at_flush`).

A key that expires is gone at once: its value of the epoch leaves the operator's memory
(an ``emit="checkpoint"`` aggregation's pending update is emitted first, the last value of
its changelog: nothing else is emitted on expiry), its stored value reads as missing until
the flush deletes it, in the same write as the epoch's other state (the context's
``expired`` keys: `processor.engine.context.StageContext.expire`), so its next record
starts from nothing. A ``process``'s timers stay: they are the user's, and often what
cleans up after the key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from processor.api.streams import Node
from processor.engine.context import StageContext
from processor.engine.expiry import Expiry, ttl_prefix
from processor.engine.state_keys import state_prefix
from processor.engine.time import NO_WATERMARK
from processor.serde.codec import sink_value


class Expiring(Protocol):
    """An operator that may expire keys (`processor.engine.operators`)."""

    node: Node
    expiry: Expiry | None

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of its epoch's memory (an ``emit="checkpoint"`` aggregation's
        pending update on first, unless ``quiet``)."""


class Expirations:
    """The TTLs of one task's operators: those among ``ops`` (in graph order) that have
    deadlines, their keys expired through ``ctx``."""

    def __init__(self, ctx: StageContext, ops: Iterable[Any]) -> None:
        self._ctx = ctx
        self._ops: dict[Node, Expiring] = {
            op.node: op for op in ops if getattr(op, "expiry", None) is not None
        }
        self.deadlines = {n: op.expiry for n, op in self._ops.items() if op.expiry is not None}
        self.clock: int | None = None  # the checkpoint's (`StageChain.tick`), for the flush

    def __bool__(self) -> bool:
        return bool(self.deadlines)

    @property
    def by_clock(self) -> bool:
        """Whether keys expire by the wall clock: no event time, and a TTL in use."""
        return not self._ctx.timed and any(e.active for e in self.deadlines.values())

    def by_watermark(self, before: int, watermark: int, quiet: bool) -> None:
        """The watermark rose from ``before`` to ``watermark``: the keys updated under
        ``before`` get their deadlines (the first watermark for those updated before any),
        then those the watermark reached expire."""
        stamped_at = before if before > NO_WATERMARK else watermark
        for node, expiry in self.deadlines.items():
            expiry.stamp(stamped_at)
            expired = expiry.due(watermark)
            if expired:
                self._drop(node, expired, quiet)

    def at_flush(self, writes: dict[bytes, bytes | None], watermark: int) -> None:
        """The epoch's end, after its values are in ``writes``: without event time, deadlines
        by the checkpoint's clock and the keys it passed deleted; with it, the keys updated
        since the watermark last moved stamped at it (the task's ``watermark``). Then every
        changed deadline."""
        clock, self.clock = self.clock, None
        timed = self._ctx.timed
        for node, expiry in self.deadlines.items():
            if timed:
                if watermark > NO_WATERMARK:
                    expiry.stamp(watermark)
                else:  # no watermark yet: stored as pending, stamped by the first one
                    expiry.stamp(None)
                    expiry.hold()
            elif clock is not None:  # an early flush (no clock) leaves its keys pending
                expiry.stamp(clock)
                prefix = state_prefix(node)
                for text in expiry.due(clock):  # none in memory: the flush took them all
                    writes[prefix + text.encode()] = None
            prefix = ttl_prefix(node)
            for text, stored in expiry.take_writes().items():
                writes[prefix + text.encode()] = None if stored is None else sink_value(stored)

    def _drop(self, node: Node, texts: list[str], quiet: bool) -> None:
        """Expired keys of ``node`` out of its operator's epoch memory; their deletions
        pending."""
        prefix = state_prefix(node)
        self._ctx.expire([prefix + t.encode() for t in texts])
        self._ops[node].expire(texts, quiet)
