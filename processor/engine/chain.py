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

This module is the wiring (the operators are in `processor.engine.operators`); beside it,
on the chain and its operators: what a shuffle's items are on either side of it
(`processor.engine.shuffle_format`), sink and late records (`processor.engine.sink_batch`),
the epoch's state write (`processor.engine.state_flush`), watermarks and timers firing
(`processor.engine.stage_time`), dead records (`processor.engine.dead`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from processor.api.ops import UNSET, load_value, merger
from processor.api.postgres import Rows
from processor.api.sinks import Headed
from processor.api.streams import Node
from processor.engine import metachain, shuffle_format, stage_time, state_flush, ttl
from processor.engine.dead import MAX_ERROR as MAX_ERROR  # re-exported: the tasks import it
from processor.engine.dead import DeadRecord as DeadRecord  # re-exported, as MAX_ERROR
from processor.engine.dead import dead_record
from processor.engine.floors import Floors
from processor.engine.meta import Meta
from processor.engine.operators import compile_operators, running
from processor.engine.operators.keyed import (
    Aggregate,
    Join,
    PerRecordAggregate,
    Process,
    Window,
)
from processor.engine.shuffle_out import ShuffleOut
from processor.engine.state_keys import state_key as _state_key
from processor.engine.time import NO_WATERMARK
from processor.models.limits import DEFAULT_RECORD_LIMIT
from processor.plan.stages import Plan, Stage


class StateBackend(Protocol):
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def write(self, items: Mapping[bytes, bytes | None]) -> None: ...


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
        self._state, self._late_topic, self._max_record = state, late_topic, max_record_bytes
        # State TTL (`processor.engine.ttl`): the keys expired this epoch (read as missing
        # until the flush deletes them: the reads go through a filter from the first expiry
        # on), the clock of the checkpoint's `tick`. The operators that may expire keys own
        # their deadlines (`expiry`); `_expiry` below finds them.
        self._expired: set[bytes] = set()
        self._clock: int | None = None
        self._reader: ttl.StateReader = state
        # The source values of the batch `values` is processing: a dead record that is one
        # of them names it (found by identity, on the first dead record of the batch).
        self._batch: list[Any] | None = None
        self._ids: dict[int, int] | None = None
        self._watermark = NO_WATERMARK  # the task's (see `watermark`)
        self.floors: Floors | None = None  # per-key watermarks inherited from a savepoint
        self.late: Counter[str] = Counter()  # late records by operator (not yet counted)
        self.sinks: dict[str, list[tuple[bytes | None, bytes]]] = {}
        # Records with headers (sinks with a headers function: `processor.api.sinks`).
        self.headed: dict[str, list[Headed]] = {}
        self.dead: list[DeadRecord] = []
        # sink_postgres: the epoch's rows per sink, taken at checkpoints (`sink_postgres`).
        self.rows: dict[str, Rows] = {}
        self.shuffles = {
            n.name: ShuffleOut(
                n,
                plan.target(n),
                shuffle_partitions[n.name],
                max_key_bytes,
                self._dead,
                combine,
                max_record_bytes,
            )
            for n in stage.shuffles
        }
        # A loop's feedback goes round uncombined: each record is processed as it is.
        self.feedback = stage.feedback
        if self.feedback is not None:
            self.shuffles[self.feedback.name] = ShuffleOut(
                self.feedback,
                stage,
                shuffle_partitions[self.feedback.name],
                max_key_bytes,
                self._dead,
                False,
                max_record_bytes,
            )
        # The operators (`processor.engine.operators`), by node; and by what the epoch's
        # end, the watermark and the clock act on, in graph order.
        self._ops = compile_operators(self, stage)
        head = self._ops[stage.head]
        self._joins = [head] if isinstance(head, Join) else []  # a join stage's head
        self._join = head.join if isinstance(head, Join) else None
        runs = [running(self._ops[n]) for n in stage.nodes]
        self._aggregates = [op for op in runs if isinstance(op, Aggregate)]
        self._processes = {op.node: op for op in runs if isinstance(op, Process)}
        windows = [op for op in runs if isinstance(op, Window)]
        self._per_record = [op for op in runs if isinstance(op, PerRecordAggregate)]
        # What keeps state other than the aggregations, in the order it is written at flush.
        self._keepers: list[PerRecordAggregate | Process | Window | Join] = [
            *self._per_record,
            *self._processes.values(),
            *windows,
            *self._joins,
        ]
        self._windows = {op.node: op.windows for op in windows}
        # Of each operator that may expire keys: the operator, and its deadlines.
        self._expiring = ttl.expiring(runs)
        self._expiry = {n: op.expiry for n, op in self._expiring.items() if op.expiry is not None}
        # Of each process with on_timer: its timers (`processor.engine.timers`).
        self._timers = {n: op.timers for n, op in self._processes.items() if op.timers is not None}
        self._ticks = any(t.processing_time for t in self._timers.values())
        timed_process = [n for n, t in self._timers.items() if not t.processing_time]
        # Of each window and shuffle: the window before it in the stage (None: the stage's
        # input is its input). A window's results come after the watermark that passes their
        # event time, so the watermark of what it feeds is held back (`stage_time.mark_into`).
        self._before = {
            n: stage_time.windows_before(n, stage)
            for n in [*self._windows, *self._timers, *stage.shuffles]
        }
        # The watermark of each window's input, and of each event-time timer process's.
        self._marks = dict.fromkeys([*self._windows, *timed_process], NO_WATERMARK)
        # What `advance` fires, in graph order: what one emits reaches the next one first.
        self._fired: list[Window | Process] = [
            op for op in runs if isinstance(op, Window | Process) and op.node in self._marks
        ]
        # The aggregation a combined shuffle record's partials go to, and how they merge.
        combiner = stage.combiner
        self._combiner: tuple[Aggregate, Callable[[Any, Any], Any]] | None = None
        aggregate = None if combiner is None else running(self._ops[combiner])
        if isinstance(aggregate, Aggregate):
            self._combiner = (aggregate, merger(aggregate.node))

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
        self._batch = values
        try:
            head = self.stage.head
            if head.meta:
                return metachain.source_values(self, head, values, quiet, times, metas)
            if not head.timed:
                self._push(head, values, quiet)
                return None
            if head.timestamp_fn is not None:
                items = stage_time.stamped(self, head, values)
            else:
                assert times is not None, "a timed source needs the records' timestamps"
                items = list(zip(times, values, strict=True))
            self._push(head, items, quiet)
            return max(t for t, _ in items) if items else None
        finally:
            self._batch = self._ids = None

    def shuffled(
        self, body: dict[str, Any] | list[list[Any]], quiet: bool = False, side: int = 0
    ) -> None:
        """One decoded shuffle record of a keyed stage's input (``side``: of a join, 1 for
        a record of its right input)."""
        self._enter(shuffle_format.into_stage, body, quiet, side)

    def fed_back(self, body: list[list[Any]], quiet: bool = False) -> None:
        """One decoded record of the loop's feedback topic: its ``[key text, value]`` items
        go through the nodes after the feedback key_by, then round the loop again."""
        assert self.feedback is not None, "fed-back records for a stage without a loop"
        self._enter(lambda c, b, q, _: c._push(c.feedback, b, q), body, quiet, 0)

    def _enter(self, into: Callable[..., None], body: Any, quiet: bool, side: int) -> None:
        if quiet:
            dead = len(self.dead)
            into(self, body, True, side)
            del self.dead[dead:]  # dead-lettered already, when the record first came
        else:
            into(self, body, False, side)

    # -- the epoch's end --------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Keys and records waiting for `flush`/`take_sinks`: what an early flush bounds."""
        return self.pending + self.output_buffered

    @property
    def output_buffered(self) -> int:
        """Records waiting for `take_sinks` and the shuffles' takes, and dead records: the
        output alone, which a task may drain at any point without a flush."""
        return (
            sum(map(len, self.shuffles.values()))
            + sum(map(len, self.sinks.values()))
            + sum(map(len, self.headed.values()))
            + len(self.dead)
        )

    @property
    def pending(self) -> int:
        """The keys whose updates wait for `flush` to go on to the operators that follow (the
        aggregations'), and those ``emit="record"`` aggregations hold: what decides an early
        flush. Only the records applied decide it, never the output buffers, so that a
        replay flushes where the first run did."""
        return sum(len(op.dirty) for op in self._aggregates) + sum(
            len(op.latest) for op in self._per_record
        )

    @property
    def ticks(self) -> bool:
        """Whether `tick` has processing-time timers to fire or wall-clock TTLs to expire
        (the task reads the clock for it at each checkpoint)."""
        return self._ticks or ttl.by_clock(self)

    @property
    def watermark(self) -> int:
        """The task's watermark: windows right after the stage's input close by it, joins
        expire by it. Set directly after a restore."""
        return self._watermark

    @watermark.setter
    def watermark(self, watermark: int) -> None:
        self._watermark = watermark
        for node in self._marks:  # graph order: a window's input's window first
            self._marks[node] = stage_time.mark_into(self, node)

    @property
    def output_watermark(self) -> int:
        """The watermark the task forwards downstream: its own, held back to the earliest
        event time the stage may still write into a shuffle (a window with lateness, a
        session or a ``process`` window emits results below the watermark)."""
        marks = (stage_time.mark_into(self, n) for n in self.stage.shuffles)
        return min(marks, default=self._watermark)

    def advance(self, watermark: int, quiet: bool = False) -> None:
        """The task's watermark rose: close the windows it passed (their results flow on, in
        graph order) and drop join records that can meet nothing any more."""
        stage_time.advance(self, watermark, quiet)

    def tick(self, now_ms: int, quiet: bool = False) -> None:
        """The wall clock is at ``now_ms``: fire the processing-time timers it passed (in a
        timed stage their output has the process's watermark as event time); the next
        `flush` expires the keys of wall-clock TTLs by it."""
        stage_time.tick(self, now_ms, quiet)

    def inherit(self, floors: Floors | None) -> None:
        """Lateness floors from a savepoint (`processor.engine.floors`) for the windows and
        the join, unless the watermark has passed them all."""
        if floors is not None and floors.highest <= self.watermark:
            floors = None
        self.floors = floors
        for op in self.timed_operators().values():
            op.floor = None if floors is None else floors.of

    def timed_operators(self) -> dict[bytes, stage_time.TimedOperator]:
        """State prefix -> operator, for the timers (and TTL deadlines) to rebuild after a
        restore."""
        return stage_time.timed_operators(self)

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
        state_flush.flush(self, quiet)

    def take_sinks(self) -> dict[str, list[tuple[bytes | None, bytes]]]:
        sinks, self.sinks = self.sinks, {}
        return sinks

    def take_headed(self) -> dict[str, list[Headed]]:
        """Sink records with headers: ``(key, value, headers)`` per topic."""
        headed, self.headed = self.headed, {}
        return headed

    def take_rows(self) -> dict[str, Rows]:
        """The epoch's rows of each PostgreSQL sink (`processor.api.postgres`)."""
        rows, self.rows = self.rows, {}
        return rows

    @property
    def has_dead(self) -> bool:
        return bool(self.dead)

    def take_dead(self) -> list[DeadRecord]:
        dead, self.dead = self.dead, []
        return dead

    # -- the operators ----------------------------------------------------------------------

    def _push(self, node: Node, batch: list[Any], quiet: bool) -> None:
        """``batch``, the output of ``node``, on to the operators of its children."""
        self._ops[node].emit(batch, quiet)

    def _load(self, node: Node, text: str) -> Any:
        (raw,) = self._reader.get_many([_state_key(node, text)])
        return UNSET if raw is None else load_value(raw)

    def _dead(self, node: Node, exc: Exception, value: Any) -> None:
        origin = None
        if self._batch is not None:  # a source value of this batch, perhaps
            ids = self._ids
            if ids is None:
                ids = self._ids = {}
                for i, v in enumerate(self._batch):
                    ids.setdefault(id(v), i)
            origin = ids.get(id(value))
        self.dead.append(dead_record(node.name, exc, value, origin))
