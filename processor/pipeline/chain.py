"""One stage's operators, chained in one task: a batch of values in; sink records, shuffle
records, state writes and dead records out.

Pure: no Kafka, and state through a two-method backend (the task's RocksDB, a dict in tests),
so the whole dataflow semantics is unit-tested without a broker; the stage task only moves
batches between Kafka and this.

Within a stage, values travel in batches. An unkeyed batch is a list of values; a keyed batch
a list of ``(key text, value)`` pairs (`ops.key_text`: a string key is itself). Per operator:

- map, filter, flat_map: the whole batch in one comprehension; when a user function raises,
  the batch is run again one record at a time and only the failing records are dead.
- key_by: the batch goes to the downstream stage's `ShuffleOut` (`shuffle_out.py`),
  pre-aggregated per key when that stage is combinable.
- count/sum/reduce/aggregate: per key, the latest value of this epoch in a dirty map (loaded
  from state on first touch); it reaches state and flows on to the operator's children at
  `flush()`, once per key: a changelog of the latest values. With ``emit="record"``
  (`processor.pipeline.per_record`) an update per record flows on at once instead.
- process: record by record, with a state handle per key; its output flows on at once.
- sink: encoded records, taken by the task at flush.

*Quiet* batches (the replay after a fallback restore) update state but emit nothing, dead
records included: their output is committed already.

In a timed pipeline (windows, joins) items carry their event time: an unkeyed item is
``(time, value)``, a keyed one ``((key text, time), value)``, so map, filter and flat_map
keep the time as they keep a key. Windowed operators and joins (`processor.pipeline.windows`)
act on records at once and again when the task's watermark rises (`advance`); ``process``
keeps the time (``state.timestamp``; its output has its record's), other aggregations and
sinks drop it.

A ``process`` with ``on_timer`` has timers (`processor.pipeline.timers`): event-time ones
fire in `advance`, processing-time ones in `tick`; they are stored at `flush`. Keys of an
operator with a TTL expire in `advance`, or at the `flush` after a `tick` without event time
(`processor.pipeline.ttl`).

Where a pipeline uses record metadata (``Node.meta``: see `processor.pipeline.plan`), items
carry a `processor.pipeline.meta.Meta` where a timed one carries the time (which the meta
holds): ``(meta, value)``, ``((key text, meta), value)``. The operators that take them run
in `processor.pipeline.metachain`; a pipeline without metadata never gets there. A
non-windowed ``process`` always takes them (``state.headers``).

This module is the dataflow; beside it, on the chain's state: what a shuffle's items are on
either side of it (`processor.pipeline.shuffle_format`), sink and late records
(`processor.pipeline.sink_batch`), the epoch's state write (`processor.pipeline.state_flush`),
watermarks and timers firing (`processor.pipeline.stage_time`), dead records
(`processor.pipeline.dead`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from itertools import chain
from typing import Any, Protocol

from processor.models.limits import DEFAULT_RECORD_LIMIT
from processor.pipeline import (
    aggregation,
    metachain,
    process_op,
    shuffle_format,
    sink_batch,
    stage_time,
    state_flush,
    ttl,
)
from processor.pipeline.api import Node
from processor.pipeline.dead import MAX_ERROR as MAX_ERROR  # re-exported: the tasks import it
from processor.pipeline.dead import DeadRecord as DeadRecord  # re-exported, as MAX_ERROR
from processor.pipeline.dead import dead_record
from processor.pipeline.floors import Floors
from processor.pipeline.meta import Meta
from processor.pipeline.ops import UNSET, folder, load_value, merger
from processor.pipeline.per_record import PerRecord
from processor.pipeline.plan import Plan, Stage
from processor.pipeline.shuffle_out import ShuffleOut
from processor.pipeline.sinks import Headed
from processor.pipeline.state_keys import state_key as _state_key
from processor.pipeline.state_keys import state_prefix as _state_prefix
from processor.pipeline.time import NO_WATERMARK
from processor.pipeline.timers import ProcessTimers
from processor.pipeline.windows import Item, JoinOperator, WindowOperator

# Nodes that pass on every input's items: a merge, a loop (its input and feedback).
_UNIONS = frozenset({"merge", "loop"})


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
        # State TTL (`processor.pipeline.ttl`): the operators that may expire keys, the keys
        # expired this epoch (read as missing until the flush deletes them: the reads go
        # through a filter from the first expiry on), the clock of the checkpoint's `tick`.
        self._expiry = ttl.expiries(stage)
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
        # Records with headers (sinks with a headers function: `processor.pipeline.sinks`).
        self.headed: dict[str, list[Headed]] = {}
        self.dead: list[DeadRecord] = []
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
        self._windows = {
            n: WindowOperator(n, partial(self._load, n), self._dead)
            for n in stage.nodes
            if n.windowed
        }
        self._join = (
            JoinOperator(stage.head, partial(self._load, stage.head)) if stage.is_join else None
        )
        # Of each process with on_timer: its timers (`processor.pipeline.timers`).
        self._timers = {
            n: ProcessTimers(n)
            for n in stage.nodes
            if n.kind == "process" and n.on_timer is not None and not n.windowed
        }
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
        self._fired = [n for n in stage.nodes if n in self._marks]
        self._folders = {n: folder(n) for n in stage.nodes if n.aggregated and not n.per_record}
        self._per_record = {
            n: PerRecord(n, _state_prefix(n), ttl.reader(self, n), self._dead, ttl.untimed(self, n))
            for n in stage.nodes
            if n.aggregated and n.per_record
        }
        # count and sum fold inline (no call per value): the word count path.
        self._adds = {n: n.kind for n in self._folders if n.kind in ("count", "sum")}
        # Per aggregation: key text -> latest value this epoch (emitted at flush) / set quietly.
        self._dirty: dict[Node, dict[str, Any]] = {n: {} for n in self._folders}
        self._quiet: dict[Node, dict[str, Any]] = {n: {} for n in self._folders}
        self._process: dict[Node, dict[str, Any]] = {
            n: {} for n in stage.nodes if n.kind == "process" and not n.windowed
        }
        combiner = stage.combiner
        self._merge = (combiner, merger(combiner)) if combiner is not None else None

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
        return (
            sum(map(len, self._dirty.values()))
            + sum(map(len, self._per_record.values()))
            + sum(map(len, self.shuffles.values()))
            + sum(map(len, self.sinks.values()))
            + sum(map(len, self.headed.values()))
            + len(self.dead)
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
        """Lateness floors from a savepoint (`processor.pipeline.floors`) for the windows and
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

    def flush(self) -> None:
        """Aggregations' latest values into state and on to their children (in graph order:
        an aggregation's output may feed another; ``emit="record"`` ones into state only,
        their updates went on already); state of ``process`` and quiet updates into state.
        Sink records and shuffle buffers are then ready to take."""
        state_flush.flush(self)

    def take_sinks(self) -> dict[str, list[tuple[bytes | None, bytes]]]:
        sinks, self.sinks = self.sinks, {}
        return sinks

    def take_headed(self) -> dict[str, list[Headed]]:
        """Sink records with headers: ``(key, value, headers)`` per topic."""
        headed, self.headed = self.headed, {}
        return headed

    @property
    def has_dead(self) -> bool:
        return bool(self.dead)

    def take_dead(self) -> list[DeadRecord]:
        dead, self.dead = self.dead, []
        return dead

    # -- the operators ----------------------------------------------------------------------

    def _push(self, node: Node, batch: list[Any], quiet: bool) -> None:
        for child in node.children:
            if not batch:
                continue
            if child.kind in _UNIONS:  # every input's items on to its children
                if node.meta != child.meta:  # an input that makes records without metadata
                    self._push(child, metachain.into_merge(node, child, batch), quiet)
                else:
                    self._push(child, batch, quiet)
            else:
                self._apply(child, batch, quiet)

    def _apply(self, node: Node, batch: list[Any], quiet: bool) -> None:
        kind, fn, parent = node.kind, node.fn, node.parent
        assert parent is not None
        if parent.meta or node.meta_in:  # records with metadata: `processor.pipeline.metachain`
            converted = metachain.enter(self, node, batch, quiet)
            if converted is None:
                return
            batch = converted
        keyed = parent.keyed
        if parent.timed:
            if kind in ("map", "filter", "flat_map"):
                keyed = True  # the time rides along like a key
            elif kind == "key_by":
                shuffle_format.key_by_timed(self, node, batch, quiet)
                return
            elif kind == "window":
                self._push(node, batch, quiet)
                return
            elif kind == "process" and not node.windowed:  # its output keeps the time
                self._push(node, process_op.process_batch(self, node, batch), quiet)
                return
            elif node.windowed:
                late: list[Item] = []
                out = self._windows[node].add(batch, self._marks[node], late)
                sink_batch.late(self, node, late, quiet)
                if not quiet:
                    self._push(node, out, quiet)
                return
            else:  # aggregations, process, sinks: without the time
                if node.ttl_ms and node.aggregated:  # a TTL from the records' times
                    ttl.touch_timed(self, node, batch)
                batch = [(k[0], v) for k, v in batch] if keyed else [v for _, v in batch]
        if kind == "map":
            assert fn is not None
            try:
                out = [(k, fn(v)) for k, v in batch] if keyed else list(map(fn, batch))
            except Exception:  # noqa: BLE001 - find the failing records one by one
                out = self._each(node, batch, keyed, lambda v: [fn(v)], fast=False)
        elif kind == "filter":
            assert fn is not None
            try:
                out = [kv for kv in batch if fn(kv[1])] if keyed else list(filter(fn, batch))
            except Exception:  # noqa: BLE001 - find the failing records one by one
                out = self._each(node, batch, keyed, lambda v: [v] if fn(v) else [], fast=False)
        elif kind == "flat_map":
            assert fn is not None
            out = self._flat_map(node, fn, batch, keyed)
        elif kind == "key_by":
            assert fn is not None
            values = [v for _, v in batch] if keyed else batch
            # key_by(str) of plain strings (word count's words) keys each by itself.
            all_str = fn is str and set(map(type, values)) <= {str}
            try:
                keys = values if all_str else list(map(fn, values))
            except Exception:  # noqa: BLE001 - keep the records it could key
                pairs = self._each(node, values, False, lambda v: [(fn(v), v)], fast=False)
                keys, values = [k for k, _ in pairs], [v for _, v in pairs]
            if not quiet:
                self.shuffles[node.name].add(keys, values, all_str)
            return
        elif node.aggregated:
            if not node.per_record:
                aggregation.fold(
                    self, node, batch, quiet, self._folders[node], self._adds.get(node)
                )
                return
            # At once, as process does; quietly in a replay (state only downstream too).
            out = self._per_record[node].add(batch)
        elif kind == "process":
            out = process_op.process_batch(self, node, batch)
        elif kind == "sink":
            if quiet:
                return
            if node.sink_spec is None:
                sink_batch.sink(self, node, batch, keyed)
            else:
                sink_batch.sink_spec(self, node, node.sink_spec, batch, keyed)
            return
        else:
            raise ValueError(f"unknown operator {node!r}")
        self._push(node, out, quiet)

    def _flat_map(
        self, node: Node, fn: Callable[[Any], Iterable[Any]], batch: list[Any], keyed: bool
    ) -> list[Any]:
        if node.batch_fn is not None and not keyed:
            try:
                out = node.batch_fn(batch)
                return out if type(out) is list else list(out)
            except Exception:  # noqa: BLE001 - find the failing records one by one
                pass
        return self._each(node, batch, keyed, fn)

    def _each(
        self,
        node: Node,
        batch: list[Any],
        keyed: bool,
        fn: Callable[[Any], Iterable[Any]],
        fast: bool = True,
    ) -> list[Any]:
        """``fn`` over every value, flattened (keeping keys); a failing record is dead."""
        if fast:
            try:
                if keyed:
                    return [(k, out) for k, v in batch for out in fn(v)]
                return list(chain.from_iterable(map(fn, batch)))
            except Exception:  # noqa: BLE001 - find the failing records one by one
                pass
        result: list[Any] = []
        for item in batch:
            value = item[1] if keyed else item
            try:
                outs = list(fn(value))
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self._dead(node, exc, value)
                continue
            if keyed:
                result.extend((item[0], out) for out in outs)
            else:
                result.extend(outs)
        return result

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
