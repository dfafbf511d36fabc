"""The per-key operators of the user's API, shared by `processor.api.streams.KeyedStream`
(per key) and `processor.api.streams.WindowedStream` (per key and window): count, sum,
reduce, aggregate and process.

``ttl_ms`` (per key only): a key whose state has not been updated for that long is deleted
(`processor.engine.expiry`; docs/state-ttl.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from processor.api.args import check_callable, check_emit, check_ttl
from processor.api.node import Emit
from processor.errors import PipelineError

if TYPE_CHECKING:
    from processor.api.streams import KeyedStream


class Aggregations:
    """count, sum, reduce, aggregate and process: per key on a `KeyedStream`, per key and
    window on a `WindowedStream` (each says how it makes the node).

    ``emit`` of count, sum, reduce and aggregate: ``"checkpoint"`` (the default) emits each
    key's latest value once per checkpoint, a changelog whose last value per key is the
    result; ``"record"`` emits ``(key, new value)`` for every input record, in input order
    per key (no pre-aggregation before the shuffle: every update is seen).

    ``ttl_ms``: a key whose state has not been updated for that long is deleted, and its
    next record starts again from nothing (``initial``, or the first value); in a pipeline
    with event time it counts against the watermark, otherwise in wall-clock time at
    checkpoints. Nothing is emitted when a key expires (docs/state-ttl.md)."""

    def _aggregation(self, kind: str, name: str | None, **attrs: Any) -> KeyedStream:
        raise NotImplementedError

    def count(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream:
        """Per key, the number of values so far.

        >>> p = Pipeline()
        >>> counts = p.source("clicks").key_by(lambda url: url).count(emit="record")
        >>> counts.sink("clicks-per-url")  # "a" "b" "a" -> (a, 1) (b, 1) (a, 2)

        With ``ttl_ms=3_600_000`` a URL not clicked for an hour counts from 1 again.
        """
        return self._aggregation(
            "count", name, emit=check_emit(emit, "count"), ttl_ms=check_ttl(ttl_ms, "count")
        )

    def sum(
        self, name: str | None = None, emit: Emit = "checkpoint", ttl_ms: int | None = None
    ) -> KeyedStream:
        """Per key, the sum of the values so far; a value that is not a number is dead.

        >>> p = Pipeline()
        >>> orders = p.source("orders", value="json").key_by(lambda o: o["user"])
        >>> orders.map(lambda o: o["amount"]).sum(ttl_ms=86_400_000).sink("revenue")
        """
        return self._aggregation(
            "sum", name, emit=check_emit(emit, "sum"), ttl_ms=check_ttl(ttl_ms, "sum")
        )

    def reduce(
        self,
        fn: Callable[[Any, Any], Any],
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream:
        """Per key, ``fn(accumulated, value)`` folded over the values (the first one as is).

        ``fn`` should be associative: with ``emit="checkpoint"`` records of one epoch are
        combined before the shuffle.

        >>> p = Pipeline()
        >>> readings = p.source("readings", value="json").key_by(lambda r: r["sensor"])
        >>> readings.reduce(lambda a, b: max(a, b, key=lambda r: r["value"])).sink("peaks")
        """
        return self._aggregation(
            "reduce",
            name,
            fn=check_callable(fn, "reduce"),
            emit=check_emit(emit, "reduce"),
            ttl_ms=check_ttl(ttl_ms, "reduce"),
        )

    def aggregate(
        self,
        initial: Any,
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None = None,
        name: str | None = None,
        emit: Emit = "checkpoint",
        ttl_ms: int | None = None,
    ) -> KeyedStream:
        """Per key, ``add(accumulator, value)`` from ``initial``; with ``merge(a, b)`` (and
        ``emit="checkpoint"``) partial accumulators of an epoch are combined before the
        shuffle.

        >>> p = Pipeline()
        >>> readings = p.source("readings", value="json").key_by(lambda r: r["sensor"])
        >>> readings.aggregate([0, 0], lambda a, r: [a[0] + r["value"], a[1] + 1]).sink("n")
        """
        fn2 = None if merge is None else check_callable(merge, "aggregate merge")
        stream = self._aggregation(
            "aggregate",
            name,
            fn=check_callable(add, "aggregate"),
            fn2=fn2,
            emit=check_emit(emit, "aggregate"),
            ttl_ms=check_ttl(ttl_ms, "aggregate"),
        )
        stream.node.initial = initial
        return stream

    def process(
        self,
        fn: Callable[[Any, Any], Iterable[Any]],
        on_timer: Callable[[int, Any], Iterable[Any]] | None = None,
        processing_time: bool = False,
        name: str | None = None,
        ttl_ms: int | None = None,
        headers: bool | None = None,
    ) -> KeyedStream:
        """``fn(value, state)`` returns values to emit under the same key; ``state`` is this
        key's value in the operator's state: ``get(default=None)``, ``set(value)``,
        ``delete()``, and ``state.key`` (the key), ``state.timestamp`` (the record's event
        time in ms: its Kafka timestamp unless the source has a timestamp function),
        ``state.headers`` (its Kafka headers, ``(name, bytes)`` pairs:
        ``dict(state.headers).get("source")``).

        ``headers=True``: its records carry their Kafka headers from the source on, which
        costs every record on the way; ``False``: they do not (reading ``state.headers`` is
        a dead record). Left out, they do if ``fn``'s own code reads ``state.headers`` (a
        helper it calls is not looked into: say ``headers=True`` then).

        With ``on_timer``, ``state.timers`` sets timers for the key: ``set(at_ms)``,
        ``delete(at_ms)``, ``clear()``, ``pending()`` (a sorted list). Each fires once, when
        the watermark passes ``at_ms`` (with ``processing_time=True``: when the wall clock
        does), calling ``on_timer(at_ms, state)`` with the key's state; what it returns is
        emitted under the key. Timers are part of the snapshot::

            def track(event, state):
                state.set(event)
                state.timers.set(state.timestamp + 30_000)
                return []

            def expired(at_ms, state):
                return [] if state.timers.pending() else [state.get()]

            events.key_by(lambda e: e["user"]).process(track, on_timer=expired)

        ``ttl_ms``: a key's value is deleted once it has not been set for that long;
        ``state.set(value, ttl_ms=...)`` gives one key its own (its timers stay)::

            def first_sight(event, state):
                if state.get() is None:
                    state.set(True, ttl_ms=86_400_000)  # seen again after a day: new again
                    return [event]
                return []
        """
        timer = None if on_timer is None else check_callable(on_timer, "process on_timer")
        if timer is not None and self._windowed:
            raise PipelineError(
                "process(on_timer=...) on windows: a window's state ends with the window; "
                "set timers in a process on the keyed stream instead"
            )
        if processing_time and timer is None:
            raise PipelineError("process(processing_time=True) needs on_timer=")
        if headers is not None and not isinstance(headers, bool):
            raise PipelineError("process(headers=...): True, False or left out")
        if headers and self._windowed:
            raise PipelineError(
                "process(headers=True) on windows: a window's process sees no headers; read "
                "them in a process before the window"
            )
        stream = self._aggregation(
            "process", name, fn=check_callable(fn, "process"), ttl_ms=check_ttl(ttl_ms, "process")
        )
        stream.node.on_timer = timer
        stream.node.processing_time = bool(processing_time)
        stream.node.headers = headers
        return stream

    _windowed = False  # a WindowedStream's: per window, whose state ends with the window
