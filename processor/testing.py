"""Run a pipeline without a broker: `run` for a whole input at once, `Driver` step by step.

Both run the engine's own stage code, not a second interpreter: the pipeline is split by
`processor.plan.stages.plan` into the stages the engine runs, and every task of every stage
is a `processor.engine.chain.StageChain` over an in-memory state (`processor.testing_tasks`).
Shuffles go through the real `ShuffleOut` partitioning and wire encoding
(`processor.models.records`), watermarks are computed as the source and keyed tasks compute
them (`processor.engine.time`), and a *checkpoint* is what an epoch's end is in the engine:
the chains flush (aggregations emit one update per key), the shuffles deliver, the watermarks
move on, stage after stage.

::

    from processor import Pipeline
    from processor.testing import run

    p = Pipeline()
    p.source("lines").flat_map(str.split).key_by(str).count().sink("counts")
    assert run(p, {"lines": ["a b", "a"]}) == {"counts": [("a", 2), ("b", 1)]}

Inputs: a record is ``value``, ``(key, value)`` or ``(key, value, timestamp_ms)`` (a tuple
is always that: give a list for a JSON array). A ``bytes`` value goes through the source's
format, as the engine decodes it (a value that does not decode is a dead record); anything
else is taken as decoded already. ``None`` is a Kafka tombstone, which sources skip (send
``b"null"`` for JSON null), as is an empty value. A record without a timestamp gets its index
among the records of its topic (0, 1, 2, ...): deterministic, and in order. Keys and headers
are kept with each record (`SentRecord`).

Time: a source's watermark is the highest event time it has read minus its
``out_of_orderness_ms``. There is no wall clock here, so no source ever goes idle: a source
that has read nothing holds the watermark back until the end (or `Driver.advance_watermark`).
At the end `run` (and `Driver.finish`) moves every watermark past any event time, so every
window closes, every join expires and every timer fires.

State TTLs (``ttl_ms=``, docs/state-ttl.md) expire as in the engine: in event time when the
watermark a checkpoint carries reaches a key's deadline; otherwise at checkpoints by the
driver's clock (`Driver.advance_clock`; an update counts from the checkpoint after it).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from processor.api.node import PostgresSinkNode, SourceNode
from processor.api.streams import Pipeline
from processor.engine.chain import DeadRecord
from processor.engine.dead import dead_value
from processor.engine.epoch import drain
from processor.engine.meta import decode_key
from processor.engine.time import NO_WATERMARK, keyed_mark, source_marks
from processor.jobs.graph import JobGraph
from processor.models.limits import EVENT_TIME_LIMIT, event_time_error
from processor.models.murmur2 import partition_of
from processor.models.records import Watermark
from processor.plan.stages import Plan, plan
from processor.serde.codec import RecordError, decode
from processor.testing_tasks import MemoryState as MemoryState  # re-exported: tests use it
from processor.testing_tasks import (
    SentRecord,
    Task,
    advance_keyed_source,
    new_task,
    read_fed_back,
    read_shuffle,
    read_sources,
)

__all__ = ["FINAL_WATERMARK", "Driver", "SentRecord", "decode_sink_record", "run"]

# Past every event time a record may carry (`processor.models.limits.EVENT_TIME_LIMIT`) and
# every window end after it, and still an int64 as a watermark record carries it.
FINAL_WATERMARK = 1 << 61
# The topic a chain writes late records to (`Driver.late_records`).
_LATE = "<late>"

SinkRecord = tuple[bytes | None, bytes]
# `Driver.finish` gives up on a loop that still feeds records back after this many rounds.
MAX_ROUNDS = 10_000


class Driver:
    """A pipeline run step by step, in memory, with the engine's stage code.

    ``partitions``: tasks per keyed stage (partitions of each shuffle); ``source_partitions``:
    partitions of each source topic: a record with a key goes where Kafka's default
    partitioner puts it (murmur2, `processor.models.murmur2`), one without in turn.
    ``checkpoint_every``: a checkpoint after that many records sent to one source since the
    last one (None: only when `checkpoint` is called).

    >>> from processor import Pipeline
    >>> p = Pipeline()
    >>> p.source("n", value="json").key_by(lambda v: v % 2).sum().sink("sums")
    >>> d = Driver(p)
    >>> d.send("n", 3); d.send("n", 4); d.send("n", 5)
    >>> d.output("sums")  # aggregations emit at a checkpoint
    []
    >>> d.checkpoint()
    >>> d.output("sums")
    [('1', 8), ('0', 4)]
    """

    def __init__(
        self,
        pipeline: Pipeline,
        partitions: int = 1,
        source_partitions: int = 1,
        checkpoint_every: int | None = None,
    ) -> None:
        if partitions < 1 or source_partitions < 1:
            raise ValueError("partitions and source_partitions must be at least 1")
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError("checkpoint_every must be at least 1 (or None)")
        self.pipeline = pipeline
        self.plan: Plan = plan(pipeline)
        self.checkpoint_every = checkpoint_every
        self._graph = JobGraph("test", self.plan)
        self._parallelism = {
            s.name: source_partitions if s.is_source else partitions for s in self.plan.stages
        }
        self._tasks: dict[str, list[Task]] = {
            s.name: [
                new_task(self.plan, self._graph, self._parallelism, s, i, _LATE)
                for i in range(self._parallelism[s.name])
            ]
            for s in self.plan.stages
        }
        self._sources: dict[str, SourceNode] = {s.topic: s for s in pipeline.sources}
        # Per source topic: the tasks of its stage (one per partition).
        self._readers = {
            s.source.topic: self._tasks[s.name] for s in self.plan.stages if s.source is not None
        }
        self._sent: dict[str, int] = dict.fromkeys(self._sources, 0)  # records per topic
        self._since: dict[str, int] = dict.fromkeys(self._sources, 0)  # since the checkpoint
        self._forced = NO_WATERMARK  # the lowest watermark every source sends
        self._sinks: dict[str, list[SinkRecord]] = {t: [] for t in self.plan.sink_topics}
        self._late: list[SinkRecord] = []
        self._headers: dict[str, list[Any]] = {}  # of sink records written with headers
        # How each sink topic's values read back: its serde (None: a value function's bytes).
        self._serdes: dict[str, Any] = {
            n.topic: n.sink_spec.serde for n in pipeline.sinks if n.sink_spec is not None
        }
        self._dead: list[DeadRecord] = []
        # sink_postgres: each sink's table as its upserts leave it, by the key columns' values.
        self._tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            n.name: {} for n in pipeline.nodes if isinstance(n, PostgresSinkNode)
        }
        self._offsets: Counter[tuple[str, int]] = Counter()  # next offset per topic partition
        self.now_ms = 0  # the wall clock of processing-time timers (`advance_clock`)
        self.checkpoints = 0

    # -- input ------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        timestamp: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """One record into source ``topic``: decoded now (``bytes`` by the source's format,
        anything else as it is), run through the source's stage at the next checkpoint.

        Example: ``d.send("cart-events", {"type": "add", "ts": 0}, key="u1", timestamp=0)``.
        """
        source = self._sources.get(topic)
        if source is None:
            known = ", ".join(sorted(self._sources))
            raise ValueError(f"{topic!r} is not a source topic of the pipeline ({known})")
        index = self._sent[topic]
        self._sent[topic] = index + 1
        ts = index if timestamp is None else timestamp
        if value is None or (isinstance(value, bytes) and not value):
            return  # a tombstone or an empty value: sources skip them
        tasks = self._readers[topic]
        # Where Kafka's default partitioner puts it: by its key, else in turn.
        partition = index % len(tasks) if key is None else partition_of(_key_bytes(key), len(tasks))
        offset = self._offsets[topic, partition]
        self._offsets[topic, partition] = offset + 1
        try:
            if isinstance(key, bytes) and source.key_format is not None:
                key = decode_key(source.key_format, key)
            if isinstance(value, bytes):
                value = decode(source.value_format, value)
            record = SentRecord(value, key, ts, headers, partition, offset)
            kafka_time = source.timed and source.timestamp_fn is None
            if kafka_time and not -EVENT_TIME_LIMIT < ts < EVENT_TIME_LIMIT:
                raise RecordError(event_time_error(ts), "bad_event_time")
        except RecordError as exc:
            self._dead.append(DeadRecord(source.name, str(exc), dead_value(value), exc.reason))
            return
        tasks[partition].pending.append(record)
        self._since[topic] += 1
        if self.checkpoint_every is not None and self._since[topic] >= self.checkpoint_every:
            self.checkpoint()

    def send_all(self, inputs: Mapping[str, Iterable[Any]]) -> None:
        """``inputs`` as `run` sends them: per source topic, records ``value``, ``(key,
        value)`` or ``(key, value, timestamp_ms)``, the topics' records in turn (the first of
        each, then the second of each, ...).

        Example: ``d.send_all({"views": [("v1", {"id": "v1"}, 1000)], "clicks": [c1, c2]})``.
        """
        unknown = set(inputs) - set(self._sources)
        if unknown:
            raise ValueError(f"inputs for topics the pipeline does not read: {sorted(unknown)}")
        streams = [(topic, iter(records)) for topic, records in inputs.items()]
        while streams:
            still = []
            for topic, records in streams:
                for record in records:
                    if not isinstance(record, tuple):
                        self.send(topic, record)
                    elif len(record) == 2:
                        self.send(topic, record[1], key=record[0])
                    elif len(record) == 3:
                        self.send(topic, record[1], key=record[0], timestamp=record[2])
                    else:
                        raise ValueError(
                            f"{topic}: a record is value, (key, value) or (key, value, "
                            f"timestamp_ms), not a tuple of {len(record)}"
                        )
                    still.append((topic, records))
                    break
            streams = still

    def advance_clock(self, ms: int) -> None:
        """The wall clock of processing-time timers to ``ms``, then a checkpoint: the
        timers it passed fire (in the engine they fire at checkpoints too).

        Example: ``d.advance_clock(5_000)``.
        """
        self.now_ms = max(self.now_ms, ms)
        self.checkpoint()

    def advance_watermark(self, ms: int) -> None:
        """Every source's watermark to at least ``ms``, then a checkpoint carries it through:
        windows ending by then close, timers due by then fire.

        Example: ``d.advance_watermark(60_000)``.
        """
        self._forced = max(self._forced, ms)
        self.checkpoint()

    def finish(self) -> None:
        """The end of the input: a checkpoint, then every watermark past any event time, so
        that every window and timer fires.

        Example: ``d.finish(); assert d.output("per-minute") == [("add@0", 2)]``.
        """
        self.checkpoint()
        rounds = 0
        while self.in_flight:  # a loop goes round until nothing is fed back any more
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise RuntimeError(f"a loop still feeds records back after {MAX_ROUNDS} rounds")
            self.checkpoint()
        self.now_ms = FINAL_WATERMARK
        self.advance_watermark(FINAL_WATERMARK)

    @property
    def in_flight(self) -> int:
        """Records fed back round a loop (`KeyedStream.iterate`) and not processed yet: each
        checkpoint processes those of the one before."""
        return sum(
            len(t.fed_back) + len(t.fed_back_next) for ts in self._tasks.values() for t in ts
        )

    # -- the epoch's end --------------------------------------------------------------------

    def checkpoint(self) -> None:
        """What an epoch's end does in the engine, stage after stage: the sources run what
        was sent, every chain flushes (an aggregation emits each key it updated once), the
        shuffles deliver, and each task forwards its watermark downstream.

        Example: ``d.send("lines", "a a"); d.checkpoint(); assert d.output("counts") ==
        [("a", 2)]``.
        """
        for stage in self.plan.loops:  # what was fed back by the last checkpoint
            for task in self._tasks[stage.name]:
                task.fed_back, task.fed_back_next = task.fed_back_next, []
        for stage in self.plan.stages:  # upstream first: a stage's input is complete
            for task in self._tasks[stage.name]:
                if stage.is_source:
                    read_sources(task)
                    if stage.keyed_source is not None and stage.timed:
                        advance_keyed_source(task, self._forced)
                else:
                    read_shuffle(task)
                    read_fed_back(task)
                self._flush(task)
                if stage.timed:
                    self._forward_watermark(task)
        self._since = dict.fromkeys(self._since, 0)
        self.checkpoints += 1

    def _flush(self, task: Task) -> None:
        chain = task.chain
        if chain.ticks:  # processing-time timers fire at a checkpoint, as in a keyed task
            chain.tick(self.now_ms)
        loop = task.stage.feedback
        feedback = None if loop is None else (loop.name, task.index)
        drained = drain(chain, [(name, channel) for name, _, channel in task.outputs], feedback)
        for topic, records in drained.sinks.items():
            (self._late if topic == _LATE else self._sinks[topic]).extend(records)
        for topic, headed in drained.headed.items():
            self._sinks[topic].extend((k, v) for k, v, _ in headed)
            self._headers.setdefault(topic, []).extend(h for _, _, h in headed)
        for name, rows in chain.take_rows().items():
            table = self._tables[name]
            for ident, (row, _) in rows.items():  # an upsert: given columns replace theirs
                table[ident] = {**table.get(ident, {}), **row}
        for (_, target, _), shuffled in zip(task.outputs, drained.shuffled, strict=True):
            readers = self._tasks[target.name]
            for partition, value in shuffled:
                readers[partition].inbox.append(value)
        for partition, value in drained.fed_back:
            self._tasks[task.stage.name][partition].fed_back_next.append(value)
        self._dead.extend(drained.dead)

    def _forward_watermark(self, task: Task) -> None:
        """The task's watermark into every downstream shuffle partition, if it changed (a
        source's: the highest event time read minus the bound; a keyed task's: held back to
        what its windows may still emit)."""
        if task.stage.is_source and task.stage.keyed_source is None:
            assert task.source_marks is not None
            marks = source_marks(task.source_marks, task.sent_mark, self._forced)
        else:
            assert task.channel_marks is not None
            out = task.chain.output_watermark
            mark = keyed_mark(out, task.channel_marks.all_idle, task.sent_mark)
            marks = [] if mark is None else [mark]
        for mark in marks:
            task.sent_mark = mark
            for _, target, channel in task.outputs:
                for reader in self._tasks[target.name]:
                    reader.inbox.append(Watermark(channel, mark[0], mark[1]))

    # -- output -----------------------------------------------------------------------------

    def output(self, topic: str) -> list[tuple[Any, Any]]:
        """Everything written to sink ``topic`` so far, in order, as ``(key, value)`` decoded
        as the sink wrote them: the key as text (None without one), the value from JSON.

        Example: ``assert d.output("events-per-type") == [("add", 1)]``.
        """
        serde = self._serdes.get(topic, _JSON_VALUES)
        return [decode_sink_record(k, v, serde) for k, v in self.raw_output(topic)]

    def raw_output(self, topic: str) -> list[SinkRecord]:
        """Sink ``topic``'s records as the engine would produce them: key and value bytes.

        Example: ``assert d.raw_output("counts") == [(b"a", b"2")]``.
        """
        if topic not in self._sinks:
            known = ", ".join(sorted(self._sinks))
            raise ValueError(f"{topic!r} is not a sink topic of the pipeline ({known})")
        return list(self._sinks[topic])

    def outputs(self) -> dict[str, list[tuple[Any, Any]]]:
        """`output` of every sink topic (what `run` returns).

        Example: ``assert d.outputs() == {"counts": [("a", 2)]}``.
        """
        return {topic: self.output(topic) for topic in self._sinks}

    def table(self, sink: str) -> list[dict[str, Any]]:
        """The rows PostgreSQL sink ``sink`` (its operator name) has upserted so far, one per
        key, in the order they were first written.

        Example: ``assert d.table("counts.sink_postgres") == [{"word": "a", "n": 2}]``.
        """
        if sink not in self._tables:
            known = ", ".join(sorted(self._tables)) or "none"
            raise ValueError(f"{sink!r} is not a PostgreSQL sink of the pipeline ({known})")
        return list(self._tables[sink].values())

    def dead_records(self) -> list[DeadRecord]:
        """The records that went to the dead-letter topic so far: ``operator`` (the source's
        name for a value that did not decode), ``error``, a short ``value`` repr.

        Example: ``assert [r.operator for r in d.dead_records()] == ["orders.key_by"]``.
        """
        return list(self._dead)

    def headers(self, topic: str) -> list[list[tuple[str, bytes]]]:
        """The headers of sink ``topic``'s records written with headers, in order.

        Example: ``assert d.headers("outcomes") == [[("outcome", b"checkout")]]``.
        """
        return list(self._headers.get(topic, []))

    def late_records(self) -> list[tuple[Any, Any]]:
        """Records a window or join got after its watermark had passed them (the engine's
        ``<job>.late`` topic), decoded as `output` decodes them: the key of the window or
        join, the record's value.

        Example: ``assert d.late_records() == [("home", {"page": "home", "ts": 999})]``.
        """
        return [decode_sink_record(k, v) for k, v in self._late]


def _key_bytes(key: Any) -> bytes:
    """A sent key as the Kafka record would carry it (for its partition)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    return json.dumps(key, separators=(",", ":")).encode()


_JSON_VALUES = object()  # `decode_sink_record`'s default: the default sink's JSON


def decode_sink_record(
    key: bytes | None, value: bytes, serde: Any = _JSON_VALUES
) -> tuple[Any, Any]:
    """A sink record as `run` returns it: the key as UTF-8 text (bytes if it is not, None
    without one), the value as the sink wrote it: JSON by default, else by the sink's
    serde (``value="text"``, Avro...), or the bytes a value function returned."""
    shown_key: Any = key
    if key is not None:
        with contextlib.suppress(UnicodeDecodeError):
            shown_key = key.decode()
    if serde is _JSON_VALUES:
        return shown_key, json.loads(value)
    return shown_key, value if serde is None else serde.loads(value)


def run(
    pipeline: Pipeline,
    inputs: Mapping[str, Iterable[Any]],
    checkpoint_every: int = 1000,
    partitions: int = 1,
    source_partitions: int = 1,
) -> dict[str, list[tuple[Any, Any]]]:
    """Every input record through ``pipeline``; what each sink topic got, in order.

    ``inputs``: per source topic, records ``value``, ``(key, value)`` or ``(key, value,
    timestamp_ms)``. The topics' records are sent in turn (the first of each, then the second
    of each, ...), with a checkpoint every ``checkpoint_every`` records of a source, and one
    at the end, after which every watermark passes every event time. For dead and late
    records, or for control between records, use `Driver`.

    >>> from processor import Pipeline
    >>> p = Pipeline()
    >>> p.source("e", value="json").key_by(lambda e: e["type"]).count().sink("per-type")
    >>> run(p, {"e": [("u1", {"type": "add"}, 0), {"type": "add"}, b'{"type": "pay"}']})
    {'per-type': [('add', 2), ('pay', 1)]}
    """
    driver = Driver(pipeline, partitions, source_partitions, checkpoint_every)
    driver.send_all(inputs)
    driver.finish()
    return driver.outputs()
