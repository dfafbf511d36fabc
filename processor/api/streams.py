"""The user's side of a pipeline: ``Pipeline``, ``Stream`` and ``KeyedStream``.

Calls only record a graph of `Node`s (`processor.api.node`; nothing runs here);
`processor.plan.stages` splits the graph into stages at each ``key_by``. Every node has a
stable name, derived from the pipeline's shape (``<source topic>.<op>.<op>...``, ``-2`` for
the second child of the same kind) or given with ``name=``: the name is what finds an
operator's state in a snapshot again, so adding a branch later does not rename the existing
operators.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from processor.api.aggregations import Aggregations
from processor.api.args import check_callable, check_flag, check_ms, check_serde
from processor.api.node import DEFAULT_IDLE_MS, VALUE_FORMATS
from processor.api.node import Node as Node  # re-exported: the engine imports it from here
from processor.api.node import ValueFormat as ValueFormat  # re-exported, as Node
from processor.errors import PipelineError as PipelineError  # re-exported, for users

if TYPE_CHECKING:
    from processor.serde import Serde

# A stage's shuffle topic is named after its key_by: only characters Kafka allows in topics.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


# A job name (`processor.config`): the pipeline's name is its job's default.
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


class Pipeline:
    """A dataflow: sources, operators, sinks. Build it at import time of the user's module.

    ``name``: the job's name unless ``PROCESSOR_JOB_NAME`` says otherwise (default: the
    file's stem), the prefix of its internal topics and consumer groups::

        p = Pipeline(name="clicks-per-page")
    """

    def __init__(self, name: str | None = None) -> None:
        if name is not None and (type(name) is not str or not _JOB_NAME.fullmatch(name)):
            raise PipelineError(
                f"Pipeline(name={name!r}): letters, digits, '-' and '_', at most 100, "
                "starting with a letter or digit (it names the job's topics)"
            )
        self.name = name
        self.nodes: list[Node] = []
        self._names: set[str] = set()

    def source(
        self,
        topic: str,
        value: ValueFormat | Serde = "text",
        name: str | None = None,
        timestamp: Callable[[Any], Any] | None = None,
        out_of_orderness_ms: int = 0,
        idle_ms: int = DEFAULT_IDLE_MS,
        key: Any = None,
    ) -> Stream:
        """Records of an existing topic; one source task per partition.

        ``key``: the Kafka key's format ("text", "json", "bytes", or an object with
        ``loads(bytes)``), for functions given ``meta=True`` (``meta.key``); a key that
        does not decode sends its record to the DLQ, as a value that does not.
        ``p.source("carts", key="text").key_by(lambda v, meta: meta.key, meta=True)``

        Event time (used by windows and joins): ``timestamp(value)`` in milliseconds, by
        default the Kafka record's timestamp. The source's watermark is the highest timestamp
        seen minus ``out_of_orderness_ms``; a partition with no records for ``idle_ms`` does
        not hold it back.

        ``value``: ``"text"``, ``"json"``, ``"bytes"`` or a serde (`processor.serde`), e.g.
        ``p.source("clicks", value=Avro(schema))``; a record it cannot decode is dead.
        """
        if not isinstance(topic, str) or not topic:
            raise PipelineError("source(topic): the topic must be a non-empty string")
        if isinstance(value, str) and value not in VALUE_FORMATS:
            raise PipelineError(
                f"source({topic!r}, value={value!r}): value must be one of {VALUE_FORMATS} "
                "or a serde"
            )
        where = f"source({topic!r})"
        for other in self.sources:
            if other.topic == topic:
                # Source tasks commit their positions per topic partition in the job's group:
                # two stages on one topic would overwrite each other's.
                raise PipelineError(
                    f"{where} is read twice (source {other.name!r} reads it already): read a "
                    f"topic once and branch the stream, s = p.source({topic!r}); s.map(...); "
                    "s.filter(...)"
                )
        node = Node("source", self._name(name, topic), None, keyed=False, topic=topic)
        node.value_format = value if isinstance(value, str) else check_serde(value, where, topic)
        if key is not None:
            if key not in VALUE_FORMATS and not callable(getattr(key, "loads", None)):
                raise PipelineError(
                    f"{where} key={key!r}: one of {VALUE_FORMATS} or an object with loads()"
                )
            node.key_format = key
        if timestamp is not None:
            node.timestamp_fn = check_callable(timestamp, f"{where} timestamp")
        node.out_of_orderness_ms = check_ms(out_of_orderness_ms, f"{where} out_of_orderness_ms")
        node.idle_ms = check_ms(idle_ms, f"{where} idle_ms", positive=True)
        self._add(node)
        return Stream(self, node)

    @property
    def sources(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "source"]

    @property
    def sinks(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "sink"]

    def _child(self, parent: Node, kind: str, name: str | None, keyed: bool, **attrs: Any) -> Node:
        if name is None:
            same = sum(1 for c in parent.children if c.kind == kind)
            derived = f"{parent.name}.{kind}" + (f"-{same + 1}" if same else "")
        else:
            derived = name
        node = Node(kind, self._name(name, derived), parent, keyed=keyed, **attrs)
        parent.children.append(node)
        self._add(node)
        return node

    def _name(self, given: str | None, derived: str) -> str:
        name = derived if given is None else given
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PipelineError(
                f"operator name {name!r}: use letters, digits, '.', '_' and '-' (at most 200)"
            )
        if name in self._names:
            raise PipelineError(f"operator name {name!r} is used twice")
        return name

    def _add(self, node: Node) -> None:
        self._names.add(node.name)
        self.nodes.append(node)


class Stream:
    """Records without a key. Every method returns a new stream; a stream may be used again."""

    def __init__(self, pipeline: Pipeline, node: Node) -> None:
        self.pipeline = pipeline
        self.node = node

    def _then(self, kind: str, name: str | None, **attrs: Any) -> Node:
        return self.pipeline._child(self.node, kind, name, self.node.keyed, **attrs)

    def _same(self, node: Node) -> Self:
        """A stream of this one's kind (keyed stays keyed) over ``node``."""
        return type(self)(self.pipeline, node)

    def map(self, fn: Callable[..., Any], name: str | None = None, meta: bool = False) -> Self:
        """``fn(value)`` in place of each value; with ``meta=True``, ``fn(value, meta)``
        gets the record's `processor.Meta` too: ``s.map(lambda v, m: [m.key, v], meta=True)``."""
        return self._same(
            self._then("map", name, fn=check_callable(fn, "map"), uses_meta=check_flag(meta))
        )

    def filter(self, fn: Callable[..., bool], name: str | None = None, meta: bool = False) -> Self:
        """The values for which ``fn(value)`` is true; with ``meta=True``, ``fn(value, meta)``:
        ``s.filter(lambda v, m: ("source", b"web") in m.headers, meta=True)``."""
        node = self._then(
            "filter", name, fn=check_callable(fn, "filter"), uses_meta=check_flag(meta)
        )
        return self._same(node)

    def flat_map(
        self,
        fn: Callable[..., Iterable[Any]],
        name: str | None = None,
        batched: Callable[[list[Any]], Iterable[Any]] | None = None,
        meta: bool = False,
    ) -> Self:
        """``fn(value)`` returns an iterable of values. ``batched``, if given, must do the same
        for a whole list of values at once (the outputs in order): the engine calls it per
        batch, and ``fn`` only to find the failing records of a batch it raised on. (On a keyed
        stream every output keeps its value's key: no batch form.) With ``meta=True``,
        ``fn(value, meta)`` (no batch form either): every output keeps the record's meta.
        ``s.flat_map(lambda v, m: [v] * len(m.headers), meta=True)``"""
        node = self._then(
            "flat_map", name, fn=check_callable(fn, "flat_map"), uses_meta=check_flag(meta)
        )
        if batched is not None and not self.node.keyed and not meta:
            node.batch_fn = check_callable(batched, "flat_map batched")
        return self._same(node)

    def key_by(
        self, fn: Callable[..., Any], name: str | None = None, meta: bool = False
    ) -> KeyedStream:
        """Key each value by ``fn(value)``: a shuffle, so that one task sees all of a key.
        With ``meta=True``, ``fn(value, meta)``: ``s.key_by(lambda v, m: m.key, meta=True)``
        keys by the Kafka key (read with ``source(..., key="text")``)."""
        node = self.pipeline._child(
            self.node,
            "key_by",
            name,
            keyed=True,
            fn=check_callable(fn, "key_by"),
            uses_meta=check_flag(meta),
        )
        return KeyedStream(self.pipeline, node)

    def merge(self, *others: Stream, name: str | None = None) -> Self:
        """The union of this stream and ``others``: every record of each, with its key (and
        event time), in no particular order between the inputs.

        All must be of this pipeline and all keyed or all unkeyed::

            clicks = p.source("clicks", value="json")
            views = p.source("views", value="json")
            clicks.merge(views).key_by(lambda e: e["page"]).count().sink("hits")

        Keyed streams of different stages are merged right after their ``key_by`` (each
        used for nothing else), as a join's inputs are: the merge then reads one shuffle
        that both write, so that one task sees all of a key.
        """
        where = "merge(...)"
        if not others:
            raise PipelineError(f"{where}: give at least one other stream")
        nodes = [self.node]
        for other in others:
            if not isinstance(other, Stream) or other.pipeline is not self.pipeline:
                raise PipelineError(f"{where}: every input must be a stream of this pipeline")
            if other.node.keyed != self.node.keyed:
                raise PipelineError(
                    f"{where}: {self.node.name!r} and {other.node.name!r} are not both keyed "
                    "or both unkeyed (key_by the unkeyed one first)"
                )
            if other.node in nodes:
                raise PipelineError(f"{where}: {other.node.name!r} is merged twice")
            nodes.append(other.node)
        node = self._then("merge", name)
        node.merged = nodes[1:]
        for other_node in node.merged:
            other_node.children.append(node)
        return self._same(node)

    def sink(
        self,
        topic: str,
        key: Callable[[Any, Any], Any] | None = None,
        value: Any = "json",
        headers: Callable[[Any, Any], Any] | None = None,
        name: str | None = None,
    ) -> None:
        """Write to ``topic`` (created if missing); by default key ``str(key)`` (none on an
        unkeyed stream) and the value as JSON text.

        ``key(k, v)``: the record's key from the stream's key (None if unkeyed) and the value,
        as ``str`` (UTF-8), ``bytes`` or None (no key). ``value``: ``"json"``, ``"text"``
        (a str), ``"bytes"``, a serde (`processor.serde`) or ``fn(k, v) -> bytes``.
        ``headers(k, v)``: a list of ``(str, bytes)``. A function that raises or returns
        something else makes the record dead. Keyed records go to the partition Java's
        producers choose (murmur2 of the key bytes)::

            carts.sink("outcomes", key=lambda k, v: v["user"], value="json",
                       headers=lambda k, v: [("source", b"carts")])
        """
        if not isinstance(topic, str) or not topic:
            raise PipelineError("sink(topic): the topic must be a non-empty string")
        spec = None
        if key is not None or value != "json" or headers is not None:
            from processor.api.sinks import SinkSpec
            from processor.serde import JSON

            spec = SinkSpec.of(topic, key, value, headers)  # checked before the node is added
            if key is None and headers is None and spec.serde is JSON:
                spec = None  # value=processor.serde.JSON: the defaults, and their fast path
        self._then("sink", name, topic=topic).sink_spec = spec

    def sink_postgres(
        self,
        dsn: str,
        table: str,
        key_columns: list[str],
        columns: Callable[[Any, Any], Mapping[str, Any]],
        name: str | None = None,
    ) -> None:
        """Upsert a row per record into ``table``, an existing PostgreSQL table, exactly once.

        ``columns(key, value)`` gives the row as ``{column: value}`` (``key`` is None on an
        unkeyed stream); it must hold ``key_columns``, the columns of the table's primary key
        or of a unique index: a row whose key is in the table already replaces its other
        columns. Values go through psycopg (a dict as ``jsonb``). Rows are written at each
        checkpoint, in a transaction prepared before the task's Kafka transaction commits and
        committed after (docs/postgres.md); a row the database refuses is a dead record.
        Needs ``pip install 'processor[postgres]'`` and a server with
        ``max_prepared_transactions`` above 0::

            counts.sink_postgres(
                "postgresql://app@db/app", "word_counts", key_columns=["word"],
                columns=lambda word, n: {"word": word, "n": n},
            )
        """
        from processor.api.postgres import PostgresTarget

        target = PostgresTarget.of(dsn, table, key_columns, columns)
        self._then("sink_postgres", name).postgres = target


class KeyedStream(Aggregations, Stream):
    """Records with a key: map, filter and flat_map act on the value and keep the key."""

    def _aggregation(self, kind: str, name: str | None, **attrs: Any) -> KeyedStream:
        return self._same(self._then(kind, name, **attrs))

    def window(
        self,
        size_ms: int | None = None,
        slide_ms: int | None = None,
        gap_ms: int | None = None,
        lateness_ms: int = 0,
        name: str | None = None,
        bounds: bool = False,
    ) -> WindowedStream:
        """Event-time windows per key: tumbling (``size_ms``), hopping (``size_ms`` and
        ``slide_ms``) or session (``gap_ms``: a window closes after that long without a
        record of its key). The aggregation that follows emits once per window, when the
        watermark passes the window's end plus ``lateness_ms``, under the key
        ``"<key>@<window start ms>"``; records for windows emitted already are late.

        ``bounds=True``: each result (each record a windowed ``process`` emits) comes as
        ``{"key": <key>, "start": <ms>, "end": <ms>, "value": <result>}``, the window
        ``[start, end)``, so that what follows needs no key parsing::

            counts.key_by(lambda b: b["auction"]).window(size_ms=10_000, bounds=True).count()
            # -> {"key": 7, "start": 20000, "end": 30000, "value": 3}
        """
        where = f"window(size_ms={size_ms}, slide_ms={slide_ms}, gap_ms={gap_ms})"
        node = self._then("window", name)
        if gap_ms is not None:
            if size_ms is not None or slide_ms is not None:
                raise PipelineError(f"{where}: a session window takes gap_ms alone")
            node.gap_ms = check_ms(gap_ms, f"{where} gap_ms", positive=True)
        else:
            if size_ms is None:
                raise PipelineError(f"{where}: give size_ms (or gap_ms for session windows)")
            node.size_ms = check_ms(size_ms, f"{where} size_ms", positive=True)
            if slide_ms is not None:
                node.slide_ms = check_ms(slide_ms, f"{where} slide_ms", positive=True)
                if node.slide_ms > node.size_ms:
                    raise PipelineError(f"{where}: slide_ms larger than size_ms skips records")
        node.lateness_ms = check_ms(lateness_ms, f"{where} lateness_ms")
        if not isinstance(bounds, bool):
            raise PipelineError(f"{where}: bounds must be True or False")
        node.bounds = bounds
        return WindowedStream(self.pipeline, node)

    def join(
        self, other: KeyedStream, within_ms: int | None, name: str | None = None
    ) -> KeyedStream:
        """Pairs ``[left, right]`` of records with equal keys whose event times differ by at
        most ``within_ms``, each emitted once, under the same key. Both streams must come
        straight from a ``key_by`` used for nothing else.

        ``within_ms=None``: a join with no time bound (SQL's inner join): every record meets
        every partner of its key that came before or comes after it, whatever their times,
        and none is late. Its state keeps every record of both sides for good, so use it
        where a side's keys are few or bounded (a person and their auctions)::

            people = events.filter(is_person).key_by(lambda e: e["id"])
            auctions = events.filter(is_auction).key_by(lambda e: e["seller"])
            people.join(auctions, within_ms=None).map(lambda pair: ...)
        """
        if not isinstance(other, KeyedStream) or other.pipeline is not self.pipeline:
            raise PipelineError("join(other): other must be a keyed stream of the same pipeline")
        for side in (self.node, other.node):
            if side.kind != "key_by" or side.children:
                raise PipelineError(
                    f"join: {side.name!r} must be a key_by with no other use (join right "
                    "after key_by; key_by again for another branch)"
                )
        if self.node is other.node:
            raise PipelineError("join: a stream cannot join itself")
        node = self._then("join", name)
        node.within_ms = None if within_ms is None else check_ms(within_ms, "join within_ms")
        node.other = other.node
        other.node.children.append(node)
        return self._same(node)

    def iterate(
        self, body: Callable[[KeyedStream], tuple[KeyedStream, Stream]], name: str | None = None
    ) -> Stream:
        """A loop: ``body(stream)`` returns ``(feedback, output)``; every record of
        ``feedback`` (a keyed stream ending in its own ``key_by``) enters ``stream`` again
        under its key, exactly once, at the next checkpoint after it is committed. Returns
        ``output`` (`processor.api.loops`)::

            def body(hops):
                stepped = hops.process(step)            # per key, with state
                back = stepped.filter(lambda m: "to" in m).key_by(lambda m: m["to"])
                return back, stepped.filter(lambda m: "done" in m)

            p.source("edges", value="json").key_by(lambda e: e["u"]).iterate(body)
        """
        from processor.api.loops import iterate

        return iterate(self, body, name)


class WindowedStream(Aggregations):
    """A keyed stream cut into windows: each aggregation is per key and window, its result
    emitted once when the window closes; ``process`` gets the window's state and emits at
    once under ``"<key>@<start>"`` (the state is deleted when the window closes)."""

    _windowed = True

    def __init__(self, pipeline: Pipeline, node: Node) -> None:
        self.pipeline = pipeline
        self.node = node

    def _aggregation(self, kind: str, name: str | None, **attrs: Any) -> KeyedStream:
        if self.node.gap_ms and kind == "process":
            raise PipelineError("process on session windows: sessions merge, their state cannot")
        if self.node.gap_ms and kind == "aggregate" and attrs.get("fn2") is None:
            raise PipelineError("aggregate on session windows needs merge= (sessions merge)")
        if attrs.get("ttl_ms"):
            raise PipelineError(
                f"{kind}(ttl_ms=...) on a window: a window's state is deleted when it closes "
                "(for a TTL, aggregate without the window)"
            )
        if attrs.get("emit") == "record":
            raise PipelineError(
                f'{kind}(emit="record") on a window: a window emits once, when it closes '
                "(for an update per record, aggregate without the window)"
            )
        node = self.pipeline._child(self.node, kind, name, keyed=True, **attrs)
        return KeyedStream(self.pipeline, node)
