"""One stage's operators, chained in one task: a batch of values in; sink records, shuffle
records, state writes and dead records out.

Pure: no Kafka, and state through a two-method backend (the task's RocksDB, a dict in tests),
so the whole dataflow semantics is unit-tested without a broker; the stage task only moves
batches between Kafka and this.

The chain is the wiring of the stage's operators (`processor.engine.operators`): one small
class per kind of node, compiled from the graph when the chain is built, each running its
batches and emitting to its children's. The chain feeds its input to the head's, and holds
what the epoch's end, the watermark and the clock act on.

Within a stage, values travel in batches. An unkeyed batch is a list of values; a keyed batch
a list of ``(key text, value)`` pairs (`ops.key_text`: a string key is itself). Per operator:

- map, filter, flat_map: the whole batch in one comprehension; when a user function raises,
  the batch is run again one record at a time and only the failing records are dead.
- key_by: the batch goes to the downstream stage's `ShuffleOut` (`shuffle_out.py`),
  pre-aggregated per key when that stage is combinable.
- count/sum/reduce/aggregate: per key, the latest value of this epoch in a dirty map (loaded
  from state on first touch); it reaches state and flows on to the operator's children at
  `flush()`, once per key: a changelog of the latest values. With ``emit="record"``
  (`processor.engine.per_record`) an update per record flows on at once instead.
- process: record by record, with a state handle per key; its output flows on at once.
- sink: encoded records, taken by the task at flush.

*Quiet* batches (the replay after a fallback restore) update every operator's state as the
first run did, and their updates flow on quietly to the operators that follow; sinks,
shuffles and the dead records drop them: their output is committed already. The replay
flushes where the first run did (`flush` with ``quiet``, see `pending`), so an operator after
an aggregation sees the same updates in the same order.

In a timed pipeline (windows, joins) items carry their event time: an unkeyed item is
``(time, value)``, a keyed one ``((key text, time), value)``, so map, filter and flat_map
keep the time as they keep a key. Windowed operators and joins (`processor.engine.windows`)
act on records at once and again when the task's watermark rises (`advance`); ``process``
keeps the time (``state.timestamp``; its output has its record's), other aggregations and
sinks drop it.

A ``process`` with ``on_timer`` has timers (`processor.engine.timers`): event-time ones
fire in `advance`, processing-time ones in `tick`; they are stored at `flush`. Keys of an
operator with a TTL expire in `advance`, or at the `flush` after a `tick` without event time
(`processor.engine.ttl`).

Where a pipeline uses record metadata (``Node.meta``: see `processor.plan.stages`), items
carry a `processor.engine.meta.Meta` where a timed one carries the time (which the meta
holds): ``(meta, value)``, ``((key text, meta), value)``. The operators that take them run
in `processor.engine.metachain`; a pipeline without metadata never gets there. A
non-windowed ``process`` always takes them (``state.headers``).

This module is the wiring (the operators are in `processor.engine.operators`, each given
the stage's `processor.engine.context.StageContext`: state reads, dead records, output);
beside it: what a shuffle's items are on either side of it (`processor.engine.shuffle_format`),
sink and late records (`processor.engine.sink_batch`), the epoch's state write
(`processor.engine.state_flush`), watermarks and timers firing (`processor.engine.stage_time`),
TTLs (`processor.engine.ttl`), dead records (`processor.engine.dead`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from processor.api.ops import load_value
from processor.api.postgres import Rows
from processor.api.sinks import Headed
from processor.api.streams import Node
from processor.engine import metachain, shuffle_format, stage_time, state_flush
from processor.engine.context import StageContext
from processor.engine.context import StateBackend as StateBackend  # re-exported
from processor.engine.dead import MAX_ERROR as MAX_ERROR  # re-exported: the tasks import it
from processor.engine.dead import DeadRecord as DeadRecord  # re-exported, as MAX_ERROR
from processor.engine.floors import Floors
from processor.engine.meta import Meta
from processor.engine.operators import StageOperators
from processor.engine.shuffle_out import ShuffleOut
from processor.engine.ttl import Expirations
from processor.models.limits import DEFAULT_RECORD_LIMIT
from processor.plan.stages import Plan, Stage


class StageChain:
    """The operators of ``stage`` for one of its tasks (``channel``: the task's index)."""

    def __init__(
        self,
        plan: Plan,
        stage: Stage,
        channel: int,
        state: StateBackend,
        shuffle_partitions: Mapping[str, int],
        max_key_bytes: int = 32768,
        late_topic: str = "",
        combine: bool = True,
        max_record_bytes: int = DEFAULT_RECORD_LIMIT,
    ) -> None:
        """``max_record_bytes``: the largest record (key and value) Kafka takes; a larger
        one is a dead record."""
        self.stage = stage
        self.channel = channel
        # What the operators share (state reads, dead records, output buffers): the chain
        # takes what the task takes from it.
        self.context = ctx = StageContext(state, stage.timed, late_topic, max_record_bytes)
        # A loop's feedback goes round uncombined: each record is processed as it is.
        self.feedback = stage.feedback
        outs = [(n, plan.target(n), combine) for n in stage.shuffles]
        if self.feedback is not None:
            outs.append((self.feedback, stage, False))
        for node, target, combined in outs:
            ctx.shuffles[node.name] = ShuffleOut(
                node,
                target,
                shuffle_partitions[node.name],
                max_key_bytes,
                ctx.fail,
                combined,
                max_record_bytes,
            )
        # The operators (`processor.engine.operators`), by node and by what the epoch's
        # end, the watermark and the clock act on; the TTLs of those with deadlines; event
        # time and timers.
        self.operators = StageOperators(ctx, stage)
        self._ttl = Expirations(ctx, self.operators.runs)
        self._time = stage_time.EventTime(ctx, stage, self.operators, self._ttl)

    # -- what the task takes (the context's) ------------------------------------------------

    @property
    def shuffles(self) -> dict[str, ShuffleOut]:
        """The shuffles into the stages downstream (and the loop's feedback), by name."""
        return self.context.shuffles

    @property
    def sinks(self) -> dict[str, list[tuple[bytes | None, bytes]]]:
        """Sink records by topic, until `take_sinks`."""
        return self.context.sinks

    @property
    def headed(self) -> dict[str, list[Headed]]:
        """Records with headers (sinks with a headers function: `processor.api.sinks`)."""
        return self.context.headed

    @property
    def rows(self) -> dict[str, Rows]:
        """sink_postgres: the epoch's rows per sink, taken at checkpoints (`take_rows`)."""
        return self.context.rows

    @property
    def late(self) -> Counter[str]:
        """Late records by operator (not yet counted)."""
        return self.context.late

    @property
    def dead(self) -> list[DeadRecord]:
        """Dead records, until `take_dead`."""
        return self.context.dead

    @property
    def floors(self) -> Floors | None:
        """Per-key watermarks inherited from a savepoint (`inherit`)."""
        return self._time.floors

    def fail(self, node: Node, exc: Exception, value: Any) -> None:
        """``value`` failed in ``node`` with ``exc`` (a sink's encoding at the checkpoint,
        say): a dead record."""
        self.context.fail(node, exc, value)

    # -- input ------------------------------------------------------------------------------

    def values(
        self,
        values: list[Any],
        quiet: bool = False,
        times: list[int] | None = None,
        metas: list[Meta] | None = None,
    ) -> int | None:
        """Decoded values of a source stage's input; in a timed pipeline with their Kafka
        timestamps (``times``), used unless the source has a timestamp function; in one with
        metadata with their records' `Meta` (``metas``, the Kafka timestamps in them).
        Returns the highest event time among them (None if untimed or none)."""
        ctx = self.context
        ctx.source_batch(values)
        try:
            head = self.stage.source
            assert head is not None, "values come into a source stage"
            if head.meta:
                meta_items = metachain.source_items(ctx, head, values, metas, times)
                self._push(head, meta_items, quiet)
                return metachain.newest(meta_items) if head.timed else None
            if not head.timed:
                self._push(head, values, quiet)
                return None
            if head.timestamp_fn is not None:
                items = stage_time.stamped(ctx, head, values)
            else:
                assert times is not None, "a timed source needs the records' timestamps"
                items = list(zip(times, values, strict=True))
            self._push(head, items, quiet)
            return max(map(itemgetter(0), items)) if items else None
        finally:
            ctx.source_batch(None)

    def shuffled(
        self, body: dict[str, Any] | list[list[Any]], quiet: bool = False, side: int = 0
    ) -> None:
        """One decoded shuffle record of a keyed stage's input (``side``: of a join, 1 for
        a record of its right input)."""
        dead = len(self.context.dead)
        shuffle_format.into_stage(self.stage, self.operators, body, quiet, side)
        if quiet:
            del self.context.dead[dead:]  # dead-lettered already, when the record first came

    def fed_back(self, body: list[list[Any]], quiet: bool = False) -> None:
        """One decoded record of the loop's feedback topic: its ``[key text, value]`` items
        go through the nodes after the feedback key_by, then round the loop again."""
        assert self.feedback is not None, "fed-back records for a stage without a loop"
        dead = len(self.context.dead)
        self._push(self.feedback, body, quiet)
        if quiet:
            del self.context.dead[dead:]  # dead-lettered already, when the record first came

    # -- the epoch's end --------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Keys and records waiting for `flush`/`take_sinks`: what an early flush bounds."""
        return self.pending + self.output_buffered

    @property
    def output_buffered(self) -> int:
        """Records waiting for `take_sinks` and the shuffles' takes, and dead records: the
        output alone, which a task may drain at any point without a flush."""
        return self.context.output_buffered

    @property
    def pending(self) -> int:
        """The keys whose updates wait for `flush` to go on to the operators that follow (the
        aggregations'), and those ``emit="record"`` aggregations hold: what decides an early
        flush. Only the records applied decide it, never the output buffers, so that a
        replay flushes where the first run did."""
        return self.operators.pending

    @property
    def ticks(self) -> bool:
        """Whether `tick` has processing-time timers to fire or wall-clock TTLs to expire
        (the task reads the clock for it at each checkpoint)."""
        return self._time.ticks or self._ttl.by_clock

    @property
    def watermark(self) -> int:
        """The task's watermark: windows right after the stage's input close by it, joins
        expire by it. Set directly after a restore."""
        return self._time.watermark

    @watermark.setter
    def watermark(self, watermark: int) -> None:
        self._time.watermark = watermark

    @property
    def output_watermark(self) -> int:
        """The watermark the task forwards downstream: its own, held back to the earliest
        event time the stage may still write into a shuffle (a window with lateness, a
        session or a ``process`` window emits results below the watermark)."""
        return self._time.output_watermark

    def advance(self, watermark: int, quiet: bool = False) -> None:
        """The task's watermark rose: close the windows it passed (their results flow on, in
        graph order) and drop join records that can meet nothing any more."""
        self._time.advance(watermark, quiet)

    def tick(self, now_ms: int, quiet: bool = False) -> None:
        """The wall clock is at ``now_ms``: fire the processing-time timers it passed (in a
        timed stage their output has the process's watermark as event time); the next
        `flush` expires the keys of wall-clock TTLs by it."""
        self._time.tick(now_ms, quiet)

    def inherit(self, floors: Floors | None) -> None:
        """Lateness floors from a savepoint (`processor.engine.floors`) for the windows and
        the join, unless the watermark has passed them all."""
        self._time.inherit(floors)

    def timed_operators(self) -> dict[bytes, stage_time.TimedOperator]:
        """State prefix -> operator, for the timers (and TTL deadlines) to rebuild after a
        restore."""
        return self._time.timed_operators()

    def restore_timers(self, prefix: bytes, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Timers of the operator at ``prefix`` from its stored state (key, value)."""
        op = self.timed_operators()[prefix]
        op.restore_timers((k[len(prefix) :].decode(), load_value(v)) for k, v in items)

    def flush(self, quiet: bool = False) -> None:
        """Aggregations' latest values into state and on to their children (in graph order:
        an aggregation's output may feed another; ``emit="record"`` ones into state only,
        their updates went on already); state of ``process`` into state. Sink records and
        shuffle buffers are then ready to take. ``quiet``: the replay after a fallback,
        whose updates reach the operators' state and no output."""
        state_flush.flush(self.context, self.operators, self._ttl, self.watermark, quiet)

    def take_sinks(self) -> dict[str, list[tuple[bytes | None, bytes]]]:
        return self.context.take_sinks()

    def take_headed(self) -> dict[str, list[Headed]]:
        """Sink records with headers: ``(key, value, headers)`` per topic."""
        return self.context.take_headed()

    def take_rows(self) -> dict[str, Rows]:
        """The epoch's rows of each PostgreSQL sink (`processor.api.postgres`)."""
        return self.context.take_rows()

    @property
    def has_dead(self) -> bool:
        return bool(self.context.dead)

    def take_dead(self) -> list[DeadRecord]:
        return self.context.take_dead()

    def _push(self, node: Node, batch: list[Any], quiet: bool) -> None:
        """``batch``, the output of ``node``, on to the operators of its children."""
        self.operators.by_node[node].emit(batch, quiet)
