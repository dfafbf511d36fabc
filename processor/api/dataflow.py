"""The typed streams of the user's API: `Stream[T]`, `KeyedStream[K, T]`, `WindowedStream[K,
T]` and `BoundedWindowedStream[K, T]` (``window(bounds=True)``: results as `Window` dicts).

A method records a node (`processor.api.graph`; nothing runs here) and returns a stream of the
type its function gives (``map(fn: Callable[[T], U]) -> Stream[U]``), so mypy checks each
function against the values it will get; the types cost nothing when the pipeline runs.
Examples run as doctests (tests/unit/test_doctests.py) with ``Pipeline`` and
`processor.testing.run` in scope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar, overload

from processor.api import aggregations, loops, tables, windowing
from processor.api.args import check_callable, check_flag
from processor.api.base import StreamBase
from processor.api.context import Meta, State, Window, WindowState
from processor.api.graph import Graph
from processor.api.node import CountNode, Emit, KeyByNode, Node, SumNode
from processor.api.tables import Aggregator
from processor.errors import PipelineError

T = TypeVar("T")
U = TypeVar("U")
K = TypeVar("K")
K2 = TypeVar("K2")
KO = TypeVar("KO")  # the key of what a per-key operator emits: K, or "<key>@<start>"
S = TypeVar("S")  # the state handle a process gets
A = TypeVar("A")


class Stream(StreamBase[T]):
    """Records of values ``T`` without a key. Every method returns a new stream; a stream may
    be used again (branches)."""

    @overload
    def map(
        self, fn: Callable[[T], U], name: str | None = None, meta: Literal[False] = False
    ) -> Stream[U]: ...
    @overload
    def map(
        self, fn: Callable[[T, Meta], U], name: str | None = None, *, meta: Literal[True]
    ) -> Stream[U]: ...
    def map(self, fn: Callable[..., Any], name: str | None = None, meta: bool = False) -> Any:
        """``fn(value)`` in place of each value; with ``meta=True``, ``fn(value, meta)`` gets
        the record's `processor.Meta` too.

        >>> p = Pipeline()
        >>> p.source("words").map(len).sink("lengths")
        >>> run(p, {"words": ["a", "abc"]})
        {'lengths': [(None, 1), (None, 3)]}
        >>> p = Pipeline()
        >>> p.source("w").map(lambda v, m: f"{m.topic}:{v}", meta=True).sink("tagged")
        >>> run(p, {"w": ["a"]})
        {'tagged': [(None, 'w:a')]}
        """
        return self._same(self._map(fn, name, meta))

    @overload
    def flat_map(
        self,
        fn: Callable[[T], Iterable[U]],
        name: str | None = None,
        batched: Callable[[list[T]], Iterable[U]] | None = None,
        meta: Literal[False] = False,
    ) -> Stream[U]: ...
    @overload
    def flat_map(
        self,
        fn: Callable[[T, Meta], Iterable[U]],
        name: str | None = None,
        batched: None = None,
        *,
        meta: Literal[True],
    ) -> Stream[U]: ...
    def flat_map(
        self,
        fn: Callable[..., Iterable[Any]],
        name: str | None = None,
        batched: Callable[[list[Any]], Iterable[Any]] | None = None,
        meta: bool = False,
    ) -> Any:
        """``fn(value)`` returns an iterable of values. ``batched``, if given, must do the same
        for a whole list of values at once (the outputs in order): the engine calls it per
        batch, and ``fn`` only to find the failing records of a batch it raised on. (On a keyed
        stream every output keeps its value's key: no batch form.) With ``meta=True``,
        ``fn(value, meta)`` (no batch form either): every output keeps the record's meta.

        >>> p = Pipeline()
        >>> p.source("lines").flat_map(str.split).sink("words")
        >>> run(p, {"lines": ["a b", "c"]})
        {'words': [(None, 'a'), (None, 'b'), (None, 'c')]}
        """
        return self._same(self._flat_map(fn, name, batched, meta))

    @overload
    def key_by(
        self, fn: Callable[[T], K2], name: str | None = None, meta: Literal[False] = False
    ) -> KeyedStream[K2, T]: ...
    @overload
    def key_by(
        self, fn: Callable[[T, Meta], K2], name: str | None = None, *, meta: Literal[True]
    ) -> KeyedStream[K2, T]: ...
    def key_by(self, fn: Callable[..., Any], name: str | None = None, meta: bool = False) -> Any:
        """Key each value by ``fn(value)``: a shuffle, so that one task sees all of a key.
        With ``meta=True``, ``fn(value, meta)``: ``s.key_by(lambda v, m: m.key, meta=True)``
        keys by the Kafka key (read with ``source(..., key="text")``).

        >>> p = Pipeline()
        >>> p.source("words").key_by(lambda w: w[0]).count().sink("by_initial")
        >>> run(p, {"words": ["ab", "ac", "b"]})
        {'by_initial': [('a', 2), ('b', 1)]}
        """
        fn, uses_meta = check_callable(fn, "key_by"), check_flag(meta)
        named = self.graph.named(self.node, KeyByNode, name)
        node = KeyByNode(named, self.node, True, fn=fn, uses_meta=uses_meta)
        return KeyedStream(self.graph, self.graph.add(node))

    def window_all(
        self,
        size_ms: int | None = None,
        slide_ms: int | None = None,
        gap_ms: int | None = None,
        lateness_ms: int = 0,
        name: str | None = None,
        bounds: Literal[True] = True,
    ) -> BoundedWindowedStream[None, T]:
        """`KeyedStream.window` over the whole stream, on one task; results as
        `processor.Window`, key None (`processor.api.windowing`)."""
        args = (size_ms, slide_ms, gap_ms, lateness_ms, name, bounds)
        return BoundedWindowedStream(self.graph, windowing.window_all(self.graph, self.node, *args))


class PerKey(Generic[K, T, KO, S]):
    """count, sum, reduce, aggregate and process over values ``T`` of keys ``K``: per key on
    a `KeyedStream` (results keyed ``KO`` = ``K``, ``process`` given a `State`), per key and
    window on a `WindowedStream` (``KO`` = ``str``, ``"<key>@<window start>"``, ``process``
    given a `WindowState`).

    ``emit`` of count, sum, reduce and aggregate: ``"checkpoint"`` (the default) emits each
    key's latest value once per checkpoint, a changelog whose last value per key is the
    result; ``"record"`` emits ``(key, new value)`` for every input record, in input order
    per key (no pre-aggregation before the shuffle: every update is seen).

    ``ttl_ms`` (not on windows): a key whose state has not been updated for that long is
    deleted, and its next record starts again from nothing (``initial``, or the first value);
    in a pipeline with event time it counts against the watermark, otherwise in wall-clock
    time at checkpoints. Nothing is emitted when a key expires (docs/state-ttl.md)."""

    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph, self.node = graph, node

    def count(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream[KO, int]:
        """Per key, the number of values so far.

        >>> p = Pipeline()
        >>> p.source("clicks").key_by(lambda url: url).count(emit="record").sink("per_url")
        >>> run(p, {"clicks": ["a", "b", "a"]})
        {'per_url': [('a', 1), ('b', 1), ('a', 2)]}

        With ``ttl_ms=3_600_000`` a URL not clicked for an hour counts from 1 again.
        """
        node = aggregations.aggregation(self.graph, self.node, CountNode, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def sum(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream[KO, T]:
        """Per key, the sum of the values so far; a value that is not a number is dead.

        >>> p = Pipeline()
        >>> orders = p.source("orders", value="json").key_by(lambda o: o["user"])
        >>> orders.map(lambda o: o["amount"]).sum(ttl_ms=86_400_000).sink("revenue")
        >>> run(p, {"orders": [{"user": "ann", "amount": 3}, {"user": "ann", "amount": 4}]})
        {'revenue': [('ann', 7)]}
        """
        node = aggregations.aggregation(self.graph, self.node, SumNode, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def reduce(
        self,
        fn: Callable[[T, T], T],
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream[KO, T]:
        """Per key, ``fn(accumulated, value)`` folded over the values (the first one as is).
        ``fn`` should be associative: with ``emit="checkpoint"`` records of one epoch are
        combined before the shuffle.

        >>> p = Pipeline()
        >>> readings = p.source("readings", value="json").key_by(lambda r: r["sensor"])
        >>> readings.map(lambda r: r["value"]).reduce(max).sink("peaks")
        >>> run(p, {"readings": [{"sensor": "s", "value": 2}, {"sensor": "s", "value": 1}]})
        {'peaks': [('s', 2)]}
        """
        node = aggregations.reduce(self.graph, self.node, fn, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def aggregate(
        self,
        initial: A,
        add: Callable[[A, T], A],
        merge: Callable[[A, A], A] | None = None,
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream[KO, A]:
        """Per key, ``add(accumulator, value)`` from ``initial``; with ``merge(a, b)`` (and
        ``emit="checkpoint"``) partial accumulators of an epoch are combined before the
        shuffle.

        >>> p = Pipeline()
        >>> temps = p.source("temps", value="json").key_by(lambda r: r["room"])
        >>> temps.aggregate([0, 0], lambda a, r: [a[0] + r["c"], a[1] + 1]).sink("totals")
        >>> run(p, {"temps": [b'{"room": "k", "c": 20}', b'{"room": "k", "c": 22}']})
        {'totals': [('k', [42, 2])]}
        """
        node = aggregations.aggregate(
            self.graph, self.node, initial, add, merge, name, emit, ttl_ms
        )
        return KeyedStream(self.graph, node)

    def process(
        self,
        fn: Callable[[T, S], Iterable[U]],
        on_timer: Callable[[int, S], Iterable[U]] | None = None,
        processing_time: bool = False,
        name: str | None = None,
        ttl_ms: int | None = None,
        headers: bool | None = None,
    ) -> KeyedStream[KO, U]:
        """``fn(value, state)`` returns values to emit under the same key; ``state`` is the
        key's `processor.State`: its value in the operator's state (``get``, ``set``,
        ``delete``), ``key``, ``timestamp`` (the record's event time), ``headers`` and timers.

        ``headers=True``: its records carry their Kafka headers from the source on, which
        costs every record on the way; ``False``: they do not (reading ``state.headers`` is
        a dead record). Left out, they do if ``fn``'s own code reads ``state.headers`` (a
        helper it calls is not looked into: say ``headers=True`` then).

        ``on_timer(at_ms, state)`` runs for each timer the key set (``state.timers``) once the
        watermark passes it (with ``processing_time=True``: the wall clock); what it returns
        is emitted under the key. ``ttl_ms``: a key's value is deleted once it has not been
        set for that long; ``state.set(value, ttl_ms=...)`` gives one key its own.

        >>> def first_sight(event, state):
        ...     if state.get() is None:
        ...         state.set(True, ttl_ms=86_400_000)  # seen again after a day: new again
        ...         return [event]
        ...     return []
        >>> p = Pipeline()
        >>> p.source("logins").key_by(lambda user: user).process(first_sight).sink("new")
        >>> run(p, {"logins": ["ann", "bob", "ann"]})
        {'new': [('ann', 'ann'), ('bob', 'bob')]}
        """
        node = aggregations.process(
            self.graph, self.node, fn, on_timer, processing_time, name, ttl_ms, headers
        )
        return KeyedStream(self.graph, node)


class KeyedStream(PerKey[K, T, K, State[K]], Stream[T]):
    """Records of values ``T`` with a key ``K``: map, filter and flat_map act on the value
    and keep the key; the per-key operators are `PerKey`'s."""

    @overload
    def map(
        self, fn: Callable[[T], U], name: str | None = None, meta: Literal[False] = False
    ) -> KeyedStream[K, U]: ...
    @overload
    def map(
        self, fn: Callable[[T, Meta], U], name: str | None = None, *, meta: Literal[True]
    ) -> KeyedStream[K, U]: ...
    def map(self, fn: Callable[..., Any], name: str | None = None, meta: bool = False) -> Any:
        """`Stream.map`, keeping each value's key."""
        return self._same(self._map(fn, name, meta))

    @overload
    def flat_map(
        self,
        fn: Callable[[T], Iterable[U]],
        name: str | None = None,
        batched: Callable[[list[T]], Iterable[U]] | None = None,
        meta: Literal[False] = False,
    ) -> KeyedStream[K, U]: ...
    @overload
    def flat_map(
        self,
        fn: Callable[[T, Meta], Iterable[U]],
        name: str | None = None,
        batched: None = None,
        *,
        meta: Literal[True],
    ) -> KeyedStream[K, U]: ...
    def flat_map(
        self,
        fn: Callable[..., Iterable[Any]],
        name: str | None = None,
        batched: Callable[[list[Any]], Iterable[Any]] | None = None,
        meta: bool = False,
    ) -> Any:
        """`Stream.flat_map`, every output keeping its value's key (``batched`` is not used:
        no batch form on a keyed stream)."""
        return self._same(self._flat_map(fn, name, batched, meta))

    def top(
        self: KeyedStream[Any, Window[K2, A]],
        n: int,
        by: Callable[[Window[K2, A]], Any],
        ties: bool = True,
        name: str | None = None,
    ) -> KeyedStream[str, Window[K2, A]]:
        """Per window, the ``n`` results of a windowed aggregation with the largest ``by``,
        over all keys (`processor.api.windowing.top_results`)."""
        node = windowing.top_results(self.graph, self.node, n, by, ties, name)
        return KeyedStream(self.graph, node)

    @overload
    def window(
        self,
        size_ms: int | None = None,
        slide_ms: int | None = None,
        gap_ms: int | None = None,
        lateness_ms: int = 0,
        name: str | None = None,
        bounds: Literal[False] = False,
    ) -> WindowedStream[K, T]: ...
    @overload
    def window(
        self,
        size_ms: int | None = None,
        slide_ms: int | None = None,
        gap_ms: int | None = None,
        lateness_ms: int = 0,
        name: str | None = None,
        *,
        bounds: Literal[True],
    ) -> BoundedWindowedStream[K, T]: ...
    def window(
        self,
        size_ms: int | None = None,
        slide_ms: int | None = None,
        gap_ms: int | None = None,
        lateness_ms: int = 0,
        name: str | None = None,
        bounds: bool = False,
    ) -> Any:
        """Event-time windows per key: tumbling (``size_ms``), hopping (``size_ms`` and
        ``slide_ms``) or session (``gap_ms``: a window closes after that long without a
        record of its key). The aggregation that follows emits once per window, when the
        watermark passes the window's end plus ``lateness_ms``, under the key
        ``"<key>@<window start ms>"``; records for windows emitted already are late.

        >>> p = Pipeline()
        >>> p.source("bids").key_by(str).window(size_ms=10).count().sink("per_window")
        >>> run(p, {"bids": [("a", "a", 1), ("a", "a", 5), ("a", "a", 12)]})
        {'per_window': [('a@0', 2), ('a@10', 1)]}

        ``bounds=True``: each result (each record a windowed ``process`` emits) comes as a
        `processor.Window`, ``{"key": <key>, "start": <ms>, "end": <ms>, "value": <result>}``,
        the window ``[start, end)``, so that what follows needs no key parsing.
        """
        node = aggregations.window(
            self.graph, self.node, size_ms, slide_ms, gap_ms, lateness_ms, name, bounds
        )
        windows = BoundedWindowedStream if node.bounds else WindowedStream
        return windows(self.graph, node)

    def join(
        self, other: KeyedStream[K, U], within_ms: int | None, name: str | None = None
    ) -> KeyedStream[K, list[Any]]:
        """Pairs ``[left, right]`` of records with equal keys whose event times differ by at
        most ``within_ms``, each emitted once, under the same key. Both streams must come
        straight from a ``key_by`` used for nothing else.

        ``within_ms=None``: a join with no time bound (SQL's inner join): every record meets
        every partner of its key that came before or comes after it, whatever their times,
        and none is late. Its state keeps every record of both sides for good, so use it
        where a side's keys are few or bounded (a person and their auctions).

        >>> p = Pipeline()
        >>> people = p.source("people", value="json").key_by(lambda e: e["id"])
        >>> bids = p.source("bids", value="json").key_by(lambda b: b["by"])
        >>> people.join(bids, within_ms=None).map(lambda pair: pair[1]["n"]).sink("bids_of")
        >>> run(p, {"people": [b'{"id": 1}'], "bids": [b'{"by": 1, "n": 5}']})
        {'bids_of': [('1', 5)]}
        """
        if not isinstance(other, KeyedStream) or other.graph is not self.graph:
            raise PipelineError("join(other): other must be a keyed stream of the same pipeline")
        node = aggregations.join(self.graph, self.node, other.node, within_ms, name)
        return KeyedStream(self.graph, node)

    def iterate(
        self,
        body: Callable[[KeyedStream[K, T]], tuple[KeyedStream[K, T], Stream[U]]],
        name: str | None = None,
    ) -> Stream[U]:
        """A loop: ``body(stream)`` returns ``(feedback, output)``; every record of
        ``feedback`` (a keyed stream ending in its own ``key_by``) enters ``stream`` again
        under its key, exactly once, at the next checkpoint after it is committed. Returns
        ``output`` (`processor.api.loops` has an example).
        """
        output: Stream[U] = loops.iterate(self.graph, self.node, body, name, Stream, KeyedStream)
        return output

    def regroup(
        self,
        by: Callable[[K, T], K2],
        aggregator: Aggregator[T, U],
        name: str | None = None,
        emit: Emit = "checkpoint",
    ) -> KeyedStream[K2, U]:
        """This stream as a table (each record its key's new value; None: the key deleted), its
        rows grouped by ``by(key, value)``: per group, ``aggregator`` over its rows' current
        values, updated as they change, emitted per checkpoint or with ``emit="record"`` per
        change (`processor.api.tables`, with examples)."""
        grouped: KeyedStream[K2, U] = tables.regroup(self, by, aggregator, name, emit)
        return grouped


class WindowedStream(PerKey[K, T, str, WindowState[K]]):
    """A keyed stream cut into windows: each aggregation is per key and window, its result
    emitted once when the window closes, keyed ``"<key>@<start>"``; ``process`` gets the
    window's state (a `processor.WindowState`) and emits at once under that key (the state
    is deleted when the window closes)."""


class BoundedWindowedStream(Generic[K, T]):
    """`WindowedStream` of ``window(bounds=True)``: each result comes as a
    `processor.Window` (its key, the window's start and end, the value)."""

    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph, self.node = graph, node

    def count(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream[str, Window[K, int]]:
        """`PerKey.count`, per window.

        >>> p = Pipeline()
        >>> p.source("bids").key_by(str).window(size_ms=10, bounds=True).count().sink("n")
        >>> run(p, {"bids": [("a", "a", 1)]})
        {'n': [('a@0', {'key': 'a', 'start': 0, 'end': 10, 'value': 1})]}
        """
        node = aggregations.aggregation(self.graph, self.node, CountNode, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def sum(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream[str, Window[K, T]]:
        """`PerKey.sum`, per window."""
        node = aggregations.aggregation(self.graph, self.node, SumNode, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def reduce(
        self,
        fn: Callable[[T, T], T],
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream[str, Window[K, T]]:
        """`PerKey.reduce`, per window."""
        node = aggregations.reduce(self.graph, self.node, fn, name, emit, ttl_ms)
        return KeyedStream(self.graph, node)

    def aggregate(
        self,
        initial: A,
        add: Callable[[A, T], A],
        merge: Callable[[A, A], A] | None = None,
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream[str, Window[K, A]]:
        """`PerKey.aggregate`, per window."""
        node = aggregations.aggregate(
            self.graph, self.node, initial, add, merge, name, emit, ttl_ms
        )
        return KeyedStream(self.graph, node)

    def process(
        self, fn: Callable[[T, WindowState[K]], Iterable[U]], name: str | None = None
    ) -> KeyedStream[str, Window[K, U]]:
        """`PerKey.process`, per window (no timers, TTL or headers on windows): each record
        ``fn`` emits comes in a `Window`."""
        node = aggregations.process(self.graph, self.node, fn, None, False, name, None, None)
        return KeyedStream(self.graph, node)

    def top(
        self, n: int, by: Callable[[T], Any], ties: bool = True, name: str | None = None
    ) -> KeyedStream[str, Window[K, T]]:
        """Per key and window, the ``n`` values with the largest ``by``, each in a `Window`
        (`processor.api.windowing.top_values`)."""
        node = windowing.top_values(self.graph, self.node, n, by, ties, name)
        return KeyedStream(self.graph, node)
