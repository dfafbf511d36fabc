"""State TTL in a stage's chain: which operators have deadlines (`of`, when an operator is
compiled: each owns its `Expiry`, touches it as it updates keys and drops what expires from
its memory, its ``expire``), the state reads that must not see a key expired this epoch
(`ExpiredFilter`), expiry by the watermark (`by_watermark`, from `StageChain.advance`) and
at the epoch's end (`at_flush`).

A key that expires is gone at once: its value of the epoch leaves the operator's memory
(an ``emit="checkpoint"`` aggregation's pending update is emitted first, the last value of
its changelog: nothing else is emitted on expiry), its stored value reads as missing until
the flush deletes it, in the same write as the epoch's other state, so its next record
starts from nothing. A ``process``'s timers stay: they are the user's, and often what
cleans up after the key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from processor.api.streams import Node
from processor.engine.expiry import Expiry, ttl_prefix
from processor.engine.state_keys import state_prefix
from processor.engine.time import NO_WATERMARK
from processor.serde.codec import sink_value

if TYPE_CHECKING:
    from processor.engine.chain import StageChain


class StateReader(Protocol):
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...


class Expiring(Protocol):
    """An operator that may expire keys (`processor.engine.operators.keyed`)."""

    node: Node
    expiry: Expiry | None

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of its epoch's memory (an ``emit="checkpoint"`` aggregation's
        pending update on first, unless ``quiet``)."""


def of(chain: StageChain, node: Node) -> Expiry | None:
    """The deadlines of ``node``'s operator, if it may expire keys: an aggregation with
    ``ttl_ms`` and every ``process`` on a keyed stream (``state.set(value, ttl_ms=...)`` may
    come); not one per window."""
    if not node.windowed and ((node.aggregated and node.ttl_ms) or node.kind == "process"):
        return Expiry(node, chain.stage.timed)
    return None


def expiring(ops: Iterable[Any]) -> dict[Node, Expiring]:
    """The operators among ``ops`` (in graph order) that may expire keys, by node."""
    return {op.node: op for op in ops if getattr(op, "expiry", None) is not None}


class ExpiredFilter:
    """The chain's state reads where an operator has a TTL: a key expired this epoch reads
    as missing (its deletion is written at the flush)."""

    def __init__(self, state: StateReader, expired: set[bytes]) -> None:
        self._state, self._expired = state, expired

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        raws = self._state.get_many(keys)
        expired = self._expired
        if not expired:
            return raws
        return [None if k in expired else raw for k, raw in zip(keys, raws, strict=True)]


def reader(chain: StageChain, expiry: Expiry | None) -> StateReader:
    """The state reads of an operator with deadlines ``expiry``: filtered if it has any."""
    if expiry is not None:
        return ExpiredFilter(chain._state, chain._expired)
    return chain._state


def by_clock(chain: StageChain) -> bool:
    """Whether keys of ``chain`` expire by the wall clock: no event time, and a TTL in use."""
    return not chain.stage.timed and any(e.active for e in chain._expiry.values())


def untimed(node: Node, expiry: Expiry | None) -> Expiry | None:
    """The TTL of an aggregation whose records come without their event time: touched as
    they fold (those with it are touched by the operator's input adapter,
    `processor.engine.operators.stateless.StripTimeTouch`)."""
    assert node.parent is not None
    return None if node.parent.timed else expiry


def by_watermark(chain: StageChain, before: int, watermark: int, quiet: bool) -> None:
    """The watermark rose from ``before`` to ``watermark``: the keys updated under ``before``
    get their deadlines (the first watermark for those updated before any), then those the
    watermark reached expire."""
    stamped_at = before if before > NO_WATERMARK else watermark
    for node, expiry in chain._expiry.items():
        expiry.stamp(stamped_at)
        expired = expiry.due(watermark)
        if expired:
            _drop(chain, node, expired, quiet)


def at_flush(chain: StageChain, writes: dict[bytes, bytes | None]) -> None:
    """The epoch's end, after its values are in ``writes``: without event time, deadlines by
    the checkpoint's clock (`StageChain.tick`) and the keys it passed deleted; with it, the
    keys updated since the watermark last moved stamped at it. Then every changed deadline."""
    clock, chain._clock = chain._clock, None
    timed = chain.stage.timed
    for node, expiry in chain._expiry.items():
        if timed:
            if chain._watermark > NO_WATERMARK:
                expiry.stamp(chain._watermark)
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


def _drop(chain: StageChain, node: Node, texts: list[str], quiet: bool) -> None:
    """Expired keys of ``node`` out of its operator's epoch memory; their deletions pending."""
    prefix = state_prefix(node)
    chain._expired.update(prefix + t.encode() for t in texts)
    if not isinstance(chain._reader, ExpiredFilter):  # no filter until a key expires
        chain._reader = ExpiredFilter(chain._state, chain._expired)
    chain._expiring[node].expire(texts, quiet)
