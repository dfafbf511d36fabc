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
fire in `advance`, processing-time ones in `tick`; they are stored at `flush`.

Where a pipeline uses record metadata (``Node.meta``: see `processor.pipeline.plan`), items
carry a `processor.pipeline.meta.Meta` where a timed one carries the time (which the meta
holds): ``(meta, value)``, ``((key text, meta), value)``. The operators that take them run
in `processor.pipeline.metachain`; a pipeline without metadata never gets there. A
non-windowed ``process`` always takes them (``state.headers``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol

from processor.models.limits import DEFAULT_RECORD_LIMIT
from processor.pipeline import aggregation, metachain, process_op
from processor.pipeline.api import Node
from processor.pipeline.dead import Position, dead_value
from processor.pipeline.floors import Floors
from processor.pipeline.meta import Meta
from processor.pipeline.ops import (
    TAGGED,
    UNSET,
    RecordError,
    event_time,
    folder,
    load_value,
    merger,
    oversized,
    sink_key_of,
    sink_value,
)
from processor.pipeline.per_record import PerRecord
from processor.pipeline.plan import Plan, Stage
from processor.pipeline.process_op import DELETED
from processor.pipeline.shuffle_out import ShuffleOut
from processor.pipeline.sinks import Headed, SinkSpec
from processor.pipeline.sinks import encode as encode_sink
from processor.pipeline.state_keys import state_key as _state_key
from processor.pipeline.state_keys import state_prefix as _state_prefix
from processor.pipeline.time import NO_WATERMARK
from processor.pipeline.timers import ProcessTimers, timers_name
from processor.pipeline.windows import DELETED as _STATE_DELETED
from processor.pipeline.windows import Item, JoinOperator, WindowOperator

MAX_ERROR = 1000  # characters of an error kept for the DLQ (a user's message may be huge)
_KEY, _VALUE = itemgetter(0), itemgetter(1)


class StateBackend(Protocol):
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def write(self, items: Mapping[bytes, bytes | None]) -> None: ...


@dataclass(frozen=True)
class DeadRecord:
    operator: str
    error: str
    value: bytes  # for the DLQ record: its JSON (`dead.dead_value`)
    reason: str = "function_error"  # its label in processor_records_skipped_total
    # The index, in the batch `StageChain.values` got, of the source value it is, if it is
    # one (the task writes that record's own bytes to the DLQ).
    origin: int | None = None
    # What failed, with its traceback (formatted only if logged or written: see deadletter).
    exc: BaseException | None = field(default=None, compare=False, repr=False)
    where: Position | None = None  # where it was read, set by the task that knows


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
        self._state = state
        self._late_topic = late_topic
        self._max_record = max_record_bytes
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
        # Whether `tick` has processing-time timers to fire (the task reads the clock then).
        self.ticks = any(t.processing_time for t in self._timers.values())
        timed_process = [n for n, t in self._timers.items() if not t.processing_time]
        # Of each window and shuffle: the window before it in the stage (None: the stage's
        # input is its input). A window's results come after the watermark that passes their
        # event time, so the watermark of what it feeds is held back (`_mark_into`).
        self._before = {
            n: _windows_before(n, stage) for n in [*self._windows, *self._timers, *stage.shuffles]
        }
        # The watermark of each window's input, and of each event-time timer process's.
        self._marks = dict.fromkeys([*self._windows, *timed_process], NO_WATERMARK)
        # What `advance` fires, in graph order: what one emits reaches the next one first.
        self._fired = [n for n in stage.nodes if n in self._marks]
        self._folders = {n: folder(n) for n in stage.nodes if n.aggregated and not n.per_record}
        self._per_record = {
            n: PerRecord(n, _state_prefix(n), state, self._dead)
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
                items = self._stamped(head, values)
            else:
                assert times is not None, "a timed source needs the records' timestamps"
                items = list(zip(times, values, strict=True))
            self._push(head, items, quiet)
            return max(t for t, _ in items) if items else None
        finally:
            self._batch = self._ids = None

    def _stamped(self, head: Node, values: list[Any]) -> list[tuple[int, Any]]:
        """(event time, value) by the source's timestamp function; a failure is dead."""
        fn = head.timestamp_fn
        assert fn is not None
        items = []
        for value in values:
            try:
                ts = event_time(fn, value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self._dead(head, exc, value)
                continue
            items.append((ts, value))
        return items

    def shuffled(
        self, body: dict[str, Any] | list[list[Any]], quiet: bool = False, side: int = 0
    ) -> None:
        """One decoded shuffle record of a keyed stage's input (``side``: of a join, 1 for
        a record of its right input)."""
        if quiet:
            dead = len(self.dead)
            self._shuffled(body, True, side)
            del self.dead[dead:]  # dead-lettered already, when the record first came
        else:
            self._shuffled(body, False, side)

    def _shuffled(self, body: dict[str, Any] | list[list[Any]], quiet: bool, side: int) -> None:
        if self.stage.head.meta and not isinstance(body, dict):
            self._push(self.stage.head, metachain.from_shuffle(body), quiet)
            return
        if self.stage.timed and not isinstance(body, dict):
            items: list[Item] = [((t, ts), v) for t, v, ts in body]
            if self._join is None:
                self._push(self.stage.head, items, quiet)
                return
            late: list[Item] = []
            out = self._join.add(side, items, self._watermark, late)
            self._late(self._join.node, late, quiet)
            if not quiet:
                self._push(self.stage.head, out, quiet)
            return
        if isinstance(body, dict):
            assert self._merge is not None, "combined records for a stage that has no combiner"
            node, merge = self._merge
            # Partial counts and sums merge by addition, like a sum's values.
            add = "sum" if node in self._adds else None
            aggregation.fold(self, node, list(body.items()), quiet, merge, add, unique=True)
        else:
            # [key text, value] lists, as decoded: they unpack like the (key, value) items.
            self._push(self.stage.head, body, quiet)

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
    def watermark(self) -> int:
        """The task's watermark: windows right after the stage's input close by it, joins
        expire by it. Set directly after a restore."""
        return self._watermark

    @watermark.setter
    def watermark(self, watermark: int) -> None:
        self._watermark = watermark
        for node in self._marks:  # graph order: a window's input's window first
            self._marks[node] = self._mark_into(node)

    @property
    def output_watermark(self) -> int:
        """The watermark the task forwards downstream: its own, held back to the earliest
        event time the stage may still write into a shuffle (a window with lateness, a
        session or a ``process`` window emits results below the watermark)."""
        return min(map(self._mark_into, self.stage.shuffles), default=self._watermark)

    def _mark_into(self, node: Node) -> int:
        """The watermark of ``node``'s input: of the windows before it (more than one
        through a merge), or the task's."""
        before = self._before[node]
        if before is None:
            return self._watermark
        return min(
            self._watermark if w is None else self._windows[w].output_mark(self._marks[w])
            for w in before
        )

    def advance(self, watermark: int, quiet: bool = False) -> None:
        """The task's watermark rose: close the windows it passed (their results flow on, in
        graph order) and drop join records that can meet nothing any more."""
        self._watermark = watermark
        dead = len(self.dead)
        if self.floors is not None and watermark >= self.floors.highest:
            self.inherit(None)  # passed: every key's lateness is the task's own again
        if self._join is not None:
            self._join.fire(watermark, quiet)
        for node in self._fired:
            # Only now: the results of the windows before it came under its old watermark.
            before, mark = self._marks[node], self._mark_into(node)
            self._marks[node] = mark
            op = self._windows.get(node)
            if op is None:  # a process's event-time timers: those the watermark passed
                process_op.fire_timers(self, node, mark - 1, before, quiet)
                continue
            out = op.fire(mark, quiet)
            if out:
                self._push(node, out, quiet)
        if quiet:
            del self.dead[dead:]  # dead-lettered already, when the watermark first came

    def tick(self, now_ms: int, quiet: bool = False) -> None:
        """The wall clock is at ``now_ms``: fire the processing-time timers it passed. In a
        timed stage their output has the process's current watermark as event time."""
        dead = len(self.dead)
        for node, timers in self._timers.items():
            if timers.processing_time:
                low = self._mark_into(node) if node.timed else None
                process_op.fire_timers(self, node, now_ms, low, quiet, event_time=False)
        if quiet:
            del self.dead[dead:]  # dead-lettered already, when the clock first came

    def inherit(self, floors: Floors | None) -> None:
        """Lateness floors from a savepoint (`processor.pipeline.floors`) for the windows and
        the join, unless the watermark has passed them all."""
        if floors is not None and floors.highest <= self.watermark:
            floors = None
        self.floors = floors
        for op in self.timed_operators().values():
            op.floor = None if floors is None else floors.of

    def timed_operators(self) -> dict[bytes, WindowOperator | JoinOperator | ProcessTimers]:
        """State prefix -> operator, for the timers to rebuild after a restore."""
        ops: list[WindowOperator | JoinOperator] = list(self._windows.values())
        if self._join is not None:
            ops.append(self._join)
        found: dict[bytes, WindowOperator | JoinOperator | ProcessTimers]
        found = {_state_prefix(op.node): op for op in ops}
        for node, timers in self._timers.items():
            found[_timers_prefix(node)] = timers
        return found

    def restore_timers(self, prefix: bytes, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Timers of the operator at ``prefix`` from its stored state (key, value)."""
        op = self.timed_operators()[prefix]
        op.restore_timers((k[len(prefix) :].decode(), load_value(v)) for k, v in items)

    def _late(self, node: Node, late: list[Item], quiet: bool) -> None:
        """Records a window or join got after its watermark: to ``<job>.late``, counted."""
        if not late or quiet:
            return
        self.late[node.name] += len(late)
        records = self.sinks.setdefault(self._late_topic, [])
        for (text, _), value in late:
            try:
                key, raw = sink_key_of(text), sink_value(value)
            except RecordError as exc:
                self._dead(node, exc, value)
                continue
            if len(key) + len(raw) > self._max_record:
                self._dead(node, oversized(len(key) + len(raw), self._max_record), value)
                continue
            records.append((key, raw))

    def flush(self) -> None:
        """Aggregations' latest values into state and on to their children (in graph order:
        an aggregation's output may feed another; ``emit="record"`` ones into state only,
        their updates went on already); state of ``process`` and quiet updates into state.
        Sink records and shuffle buffers are then ready to take."""
        writes: dict[bytes, bytes | None] = {}
        for node, dirty in self._dirty.items():
            prefix = _state_prefix(node)
            quiet = self._quiet[node]
            for text, value in quiet.items():
                if text not in dirty:
                    raw = self._encode(node, value)
                    if raw is not None:
                        writes[prefix + text.encode()] = raw
            quiet.clear()
            if not dirty:
                continue
            items = list(dirty.items())
            dirty.clear()
            sink = node.children[0] if len(node.children) == 1 else None
            if sink is not None and sink.kind == "sink" and sink.sink_spec is None:
                aggregation.flush_into_sink(self, node, prefix, items, sink, writes)
                continue
            emitted = []
            for text, value in items:
                raw = self._encode(node, value)
                if raw is not None:  # else dead: neither stored nor emitted
                    writes[prefix + text.encode()] = raw
                    emitted.append((text, value))
            self._push(node, emitted, quiet=False)
        for node, per_record in self._per_record.items():  # emitted already: state only
            prefix = _state_prefix(node)
            for text, value in per_record.take():
                raw = self._encode(node, value)
                if raw is not None:
                    writes[prefix + text.encode()] = raw
        for node, cache in self._process.items():
            prefix = _state_prefix(node)
            for text, value in cache.items():
                if value is DELETED:
                    writes[prefix + text.encode()] = None
                elif value is not UNSET:
                    raw = self._encode(node, value)
                    if raw is not None:
                        writes[prefix + text.encode()] = raw
            cache.clear()
        timed: list[WindowOperator | JoinOperator] = list(self._windows.values())
        if self._join is not None:
            timed.append(self._join)
        for op in timed:
            prefix = _state_prefix(op.node)
            for text, state in op.take_writes().items():
                key = prefix + text.encode()
                if state is _STATE_DELETED:
                    writes[key] = None
                else:
                    raw = self._encode(op.node, state)
                    if raw is not None:
                        writes[key] = raw
        for node, timers in self._timers.items():
            prefix = _timers_prefix(node)
            for text, times in timers.take_writes().items():
                writes[prefix + text.encode()] = None if times is None else sink_value(times)
        self._state.write(writes)

    def _encode(self, node: Node, value: Any) -> bytes | None:
        """A state value's bytes; None (and a dead record) if it cannot be stored."""
        try:
            return sink_value(value)
        except RecordError as exc:
            self._dead(node, exc, value)
            return None

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
            if child.kind == "merge":  # a union: every input's items on to its children
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
                self._key_by_timed(node, batch, quiet)
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
                self._late(node, late, quiet)
                if not quiet:
                    self._push(node, out, quiet)
                return
            else:  # aggregations, process, sinks: without the time
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
                self._sink(node, batch, keyed)
            else:
                self._sink_spec(node, node.sink_spec, batch, keyed)
            return
        else:
            raise ValueError(f"unknown operator {node!r}")
        self._push(node, out, quiet)

    def _key_by_timed(self, node: Node, batch: list[Any], quiet: bool) -> None:
        """key_by of items with event time: shipped uncombined with it (or combined, into a
        stage that drops it)."""
        fn = node.fn
        assert fn is not None and node.parent is not None
        keyed = node.parent.keyed
        keys: list[Any] = []
        values: list[Any] = []
        times: list[int] = []
        for first, value in batch:
            try:
                key = fn(value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self._dead(node, exc, value)
                continue
            keys.append(key)
            values.append(value)
            times.append(first[1] if keyed else first)
        if not quiet:
            self.shuffles[node.name].add(keys, values, times=times)

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
        (raw,) = self._state.get_many([_state_key(node, text)])
        return UNSET if raw is None else load_value(raw)

    def _sink(self, node: Node, batch: list[Any], keyed: bool) -> None:
        records = self.sinks.setdefault(node.topic, [])
        start = len(records)
        try:
            if keyed:
                # A plain string key's text is itself; an int's JSON its digits.
                records.extend(
                    (
                        t.encode() if t[:1] != TAGGED else sink_key_of(t),
                        b"%d" % v if type(v) is int else sink_value(v),
                    )
                    for t, v in batch
                )
            else:
                records.extend((None, sink_value(v)) for v in batch)
            if _fit(records, start, keyed, self._max_record):
                return
        except (RecordError, ValueError, RecursionError):
            pass
        del records[start:]  # extend() keeps what it appended before a failure
        limit = self._max_record
        for item in batch:
            value = item[1] if keyed else item
            try:
                key = sink_key_of(item[0]) if keyed else None
                raw = sink_value(value)
            except RecordError as exc:
                self._dead(node, exc, value)
                continue
            size = len(raw) + (len(key) if key is not None else 0)
            if size > limit:
                self._dead(node, oversized(size, limit), value)
                continue
            records.append((key, raw))

    def _sink_spec(self, node: Node, spec: SinkSpec, batch: list[Any], keyed: bool) -> None:
        """A sink with a key function, a value format or headers (`processor.pipeline.sinks`)."""
        plain, headed = encode_sink(spec, batch, keyed, self._max_record, partial(self._dead, node))
        if plain:
            self.sinks.setdefault(node.topic, []).extend(plain)
        if headed:
            self.headed.setdefault(node.topic, []).extend(headed)

    def _dead(self, node: Node, exc: Exception, value: Any) -> None:
        if isinstance(exc, RecordError):
            error, reason = _text(exc), exc.reason
        else:
            error, reason = f"{type(exc).__name__}: {_text(exc)}", "function_error"
        origin = None
        if self._batch is not None:  # a source value of this batch, perhaps
            ids = self._ids
            if ids is None:
                ids = self._ids = {}
                for i, v in enumerate(self._batch):
                    ids.setdefault(id(v), i)
            origin = ids.get(id(value))
        self.dead.append(
            DeadRecord(node.name, error[:MAX_ERROR], dead_value(value), reason, origin, exc)
        )


def _text(exc: Exception) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ fails
        return f"<{type(exc).__name__} that cannot be shown>"


def _fit(records: list[tuple[bytes | None, bytes]], start: int, keyed: bool, limit: int) -> bool:
    """Whether every record from ``start`` on is at most ``limit`` bytes (a bound from the
    largest key and value, in C loops; exact per record only if it fails)."""
    new = records[start:] if start else records
    if not new:
        return True
    largest = max(map(len, map(_VALUE, new)))
    if keyed:
        largest += max(map(len, map(_KEY, new)))
    return largest <= limit


def _windows_before(node: Node, stage: Stage) -> list[Node | None] | None:
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


def _timers_prefix(node: Node) -> bytes:
    """Where the timers of a ``process`` with ``on_timer`` are stored, per key."""
    return f"{timers_name(node)}\0".encode()
