"""`StreamBase`, what every stream of `processor.api.dataflow` has: its graph and node, the
node helpers its methods share, ``merge`` and the sinks (``sink``, ``sink_postgres``).

The examples run as doctests (tests/unit/test_doctests.py), with ``Pipeline`` and
`processor.testing.run` in scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Literal, Self, TypeVar, overload

from processor.api.args import check_callable, check_flag
from processor.api.context import Meta
from processor.api.graph import Graph
from processor.api.node import (
    FilterNode,
    FlatMapNode,
    MapNode,
    MergeNode,
    Node,
    PostgresSinkNode,
    SinkNode,
)
from processor.api.targets import PostgresTarget, SinkSpec
from processor.errors import PipelineError
from processor.serde import JSON, Serde

T = TypeVar("T")

SinkValue = Literal["json", "text", "bytes"] | Serde


class StreamBase(Generic[T]):
    """Records of values ``T``, at ``node`` of ``graph``. Every method returns a new stream;
    a stream may be used again (branches)."""

    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph = graph
        self.node = node

    def _named(self, kind: type[Node], name: str | None) -> str:
        """The name of a new node of ``kind`` after this stream's (``name`` if given)."""
        return self.graph.named(self.node, kind, name)

    def _same(self, node: Node) -> Self:
        """A stream of this one's class (keyed stays keyed) over ``node``."""
        return type(self)(self.graph, node)

    def _map(self, fn: Any, name: str | None, meta: Any) -> Node:
        fn, uses_meta = check_callable(fn, "map"), check_flag(meta)
        node = MapNode(
            self._named(MapNode, name), self.node, self.node.keyed, fn=fn, uses_meta=uses_meta
        )
        return self.graph.add(node)

    def _flat_map(self, fn: Any, name: str | None, batched: Any, meta: Any) -> Node:
        fn, uses_meta = check_callable(fn, "flat_map"), check_flag(meta)
        node = FlatMapNode(
            self._named(FlatMapNode, name), self.node, self.node.keyed, fn=fn, uses_meta=uses_meta
        )
        if batched is not None and not self.node.keyed and not meta:
            node.batch_fn = check_callable(batched, "flat_map batched")
        return self.graph.add(node)

    @overload
    def filter(
        self, fn: Callable[[T], bool], name: str | None = None, meta: Literal[False] = False
    ) -> Self: ...
    @overload
    def filter(
        self, fn: Callable[[T, Meta], bool], name: str | None = None, *, meta: Literal[True]
    ) -> Self: ...
    def filter(self, fn: Callable[..., bool], name: str | None = None, meta: bool = False) -> Self:
        """The values for which ``fn(value)`` is true; with ``meta=True``, ``fn(value, meta)``:
        ``s.filter(lambda v, m: ("source", b"web") in m.headers, meta=True)``.

        >>> p = Pipeline()
        >>> p.source("n", value="json").filter(lambda n: n % 2 == 0).sink("even")
        >>> run(p, {"n": [b"1", b"2", b"4"]})
        {'even': [(None, 2), (None, 4)]}
        """
        fn, uses_meta = check_callable(fn, "filter"), check_flag(meta)
        node = FilterNode(
            self._named(FilterNode, name), self.node, self.node.keyed, fn=fn, uses_meta=uses_meta
        )
        return self._same(self.graph.add(node))

    def merge(self, *others: StreamBase[T], name: str | None = None) -> Self:
        """The union of this stream and ``others``: every record of each, with its key (and
        event time), in no particular order between the inputs. All must be of this pipeline
        and all keyed or all unkeyed.

        >>> p = Pipeline()
        >>> clicks, views = p.source("clicks"), p.source("views")
        >>> clicks.merge(views).key_by(lambda page: page).count().sink("hits")
        >>> run(p, {"clicks": ["home"], "views": ["home", "cart"]})
        {'hits': [('home', 2), ('cart', 1)]}

        Keyed streams of different stages are merged right after their ``key_by`` (each
        used for nothing else), as a join's inputs are: the merge then reads one shuffle
        that both write, so that one task sees all of a key.
        """
        where = "merge(...)"
        if not others:
            raise PipelineError(f"{where}: give at least one other stream")
        nodes = [self.node]
        for other in others:
            if not isinstance(other, StreamBase) or other.graph is not self.graph:
                raise PipelineError(f"{where}: every input must be a stream of this pipeline")
            if other.node.keyed != self.node.keyed:
                raise PipelineError(
                    f"{where}: {self.node.name!r} and {other.node.name!r} are not both keyed "
                    "or both unkeyed (key_by the unkeyed one first)"
                )
            if other.node in nodes:
                raise PipelineError(f"{where}: {other.node.name!r} is merged twice")
            nodes.append(other.node)
        node = MergeNode(self._named(MergeNode, name), self.node, self.node.keyed)
        node.merged = nodes[1:]
        for other_node in node.merged:
            other_node.children.append(node)
        return self._same(self.graph.add(node))

    def sink(
        self,
        topic: str,
        key: Callable[[Any, T], str | bytes | None] | None = None,
        value: SinkValue | Callable[[Any, T], bytes] = "json",
        headers: Callable[[Any, T], Sequence[tuple[str, bytes | str]] | None] | None = None,
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
            spec = SinkSpec.of(topic, key, value, headers)  # checked before the node is added
            if key is None and headers is None and spec.serde is JSON:
                spec = None  # value=processor.serde.JSON: the defaults, and their fast path
        node = SinkNode(self._named(SinkNode, name), self.node, self.node.keyed, topic=topic)
        node.sink_spec = spec
        self.graph.add(node)

    def sink_postgres(
        self,
        dsn: str,
        table: str,
        key_columns: list[str],
        columns: Callable[[Any, T], Mapping[str, Any]],
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
        target = PostgresTarget.of(dsn, table, key_columns, columns)
        kind = PostgresSinkNode
        self.graph.add(kind(self._named(kind, name), self.node, self.node.keyed, postgres=target))
