"""The epoch's end of a stage's chain (`flush`): what its operators kept in memory during
the epoch goes into state in one write, and the aggregations' latest values on to their
children.

Each operator writes its own (`processor.engine.operators`): an aggregation's dirty keys
(stored and emitted, quietly in a replay); an ``emit="record"`` aggregation's keys (emitted
already); a ``process``'s cache (a deleted key as a deletion) and its timers
(`processor.engine.timers`); the windows' changed state; and the join's. Then the keys
expired by a TTL and the deadlines of the keys updated (`processor.engine.ttl`). A value
that cannot be stored is a dead record (`processor.engine.context.StageContext.encode`),
neither stored nor emitted.
"""

from __future__ import annotations

from processor.engine.context import StageContext
from processor.engine.operators import StageOperators
from processor.engine.ttl import Expirations


def flush(
    ctx: StageContext, ops: StageOperators, ttl: Expirations, watermark: int, quiet: bool
) -> None:
    """The epoch's state of every operator of ``ops`` into the state backend, and the
    aggregations' latest values on to their children, in graph order (``watermark``: the
    task's, which stamps the TTLs of keys updated by records without event time). ``quiet``:
    a replay after a fallback, as the first run but with no output (dead records included:
    they were dead-lettered when the epoch first ran)."""
    dead = len(ctx.dead)
    # Keys expired during the epoch (`processor.engine.ttl`): deleted, unless written again
    # below (a key that came back after it expired).
    writes: dict[bytes, bytes | None] = dict.fromkeys(ctx.expired)
    # The aggregations first: what they emit may reach the others' state.
    for op in ops.aggregates:
        op.flush(writes, quiet)
    for keeper in ops.keepers:
        keeper.flush(writes)
    if ttl:
        ttl.at_flush(writes, watermark)
    ctx.state.write(writes)
    ctx.expired.clear()  # read as missing until now
    if quiet:
        del ctx.dead[dead:]
