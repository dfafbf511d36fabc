"""``process``'s state handle (`KeyState`): what a user function gets for the current
record's key, over its operator's epoch cache (key text -> value, `DELETED` for a deleted
key), its timers (`processor.engine.timers`) and its keys' TTL deadlines (``expiry``, touched
on ``set``: `processor.engine.ttl`). The operator that owns them is
`processor.engine.operators.process.Process`.

One handle runs a whole batch, bound to each record's key in turn (`KeyState.run`, as Flink's
keyed state is to the current key): a handle per record cost more than the user's function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from processor.api.ops import UNSET, key_of
from processor.api.streams import Node
from processor.engine.expiry import Expiry, checked_ttl
from processor.engine.meta import Headers
from processor.engine.timers import ProcessTimers, Timers
from processor.serde.codec import RecordError

DELETED = object()  # a key ``state.delete()`` removed this epoch
Fn = Callable[[Any, "KeyState"], Iterable[Any]]  # process's function: (value, state) -> outputs
Fail = Callable[[Node, Exception, Any], None]  # a record that failed: a dead record


class KeyState:
    """``process``'s state handle for the current record's key, over the operator's epoch
    cache: valid during the call it is given to (it is bound to the next record's key after).

    ``timestamp``: the record's event time (None untimed); in ``on_timer``, the timer's."""

    __slots__ = ("_cache", "_expiry", "_headers", "_load", "_text", "_timers", "timestamp")

    def __init__(
        self,
        cache: dict[str, Any],
        text: str,
        load: Callable[[str], Any],
        timestamp: int | None = None,
        timers: ProcessTimers | None = None,
        expiry: Expiry | None = None,
        headers: Headers | None = None,
    ) -> None:
        self._cache, self._text, self._load = cache, text, load
        self.timestamp, self._timers = timestamp, timers
        self._expiry = expiry  # the operator's TTL deadlines (`processor.engine.ttl`)
        # The record's Kafka headers, where the process reads them (`reads_headers`).
        self._headers = headers

    @property
    def headers(self) -> Headers:
        """The record's Kafka headers, ``(name, bytes)`` pairs (``[]`` in ``on_timer``)."""
        if self._headers is None:
            raise RecordError(
                "state.headers: give process(fn, headers=True) to read them (without it, "
                "headers travel only to a process whose own code reads state.headers)"
            )
        return self._headers

    @property
    def key(self) -> Any:
        """The key, as the key_by function returned it (JSON-decoded if not a string)."""
        return key_of(self._text)

    @property
    def timers(self) -> Timers:
        """This key's timers (`processor.engine.timers.Timers`)."""
        if self._timers is None:
            raise RecordError(
                "state.timers: this process has no on_timer (process(fn, on_timer=...))"
            )
        return self._timers.of(self._text)

    def get(self, default: Any = None) -> Any:
        value = self._cache.get(self._text, UNSET)
        if value is UNSET:
            value = self._cache[self._text] = self._load(self._text)
        return default if value is DELETED or value is UNSET else value

    def set(self, value: Any, ttl_ms: int | None = None) -> None:
        """This key's value. ``ttl_ms``: deleted once not set for that long (None: the
        operator's ``ttl_ms``, if any); it then starts again from nothing.

        The value is stored as JSON at the epoch's end, not encoded here (a value of a list
        set again per record would cost its whole size each time): one that JSON cannot
        carry is a dead record then, naming the key, which keeps its state of the last
        checkpoint (`processor.engine.context.StageContext.encode`).

        >>> state.set({"first_seen": state.timestamp}, ttl_ms=86_400_000)  # doctest: +SKIP
        """
        if ttl_ms is not None:
            ttl_ms = checked_ttl(ttl_ms)
        self._cache[self._text] = value
        expiry = self._expiry
        if expiry is not None and (ttl_ms is not None or expiry.active):
            expiry.touch(self._text, ttl_ms, self.timestamp)

    def delete(self) -> None:
        self._cache[self._text] = DELETED
        expiry = self._expiry
        if expiry is not None and expiry.active:
            expiry.forget(self._text)

    def run(self, fn: Fn, batch: list[Any], timed: bool, fail: Fail, node: Node) -> list[Any]:
        """The engine's, not the user function's: ``fn`` over items ``((key text, event
        time), value)`` (``timed``) or ``(key text, value)``, this handle bound to each one's
        key in turn; the outputs with their record's key (and time). A record whose call
        raises is dead (``fail``)."""
        out: list[Any] = []
        append = out.append
        for first, value in batch:
            if timed:
                self._text, self.timestamp = first
            else:
                self._text = first
            try:
                emitted = list(fn(value, self))
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                fail(node, exc, value)
                continue
            for e in emitted:
                append((first, e))
        return out

    def run_meta(self, fn: Fn, batch: list[Any], timed: bool, fail: Fail, node: Node) -> list[Any]:
        """`run` over items with metadata, ``((key text, meta), value)``: the handle has the
        record's headers; the outputs ``((key text, event time), value)`` (``timed``) or
        ``(key text, value)``."""
        out: list[Any] = []
        append = out.append
        for first, value in batch:
            text, meta = first
            self._text, self.timestamp, self._headers = text, meta.timestamp, meta.headers
            try:
                emitted = list(fn(value, self))
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                fail(node, exc, value)
                continue
            key = (text, meta.timestamp) if timed else text
            for e in emitted:
                append((key, e))
        return out


class ClockTimerState(KeyState):
    """The state handle of a processing-time timer's callback: its time is the wall clock's,
    no event time, so a TTL it sets in a pipeline with event time counts from the watermark
    (`processor.engine.expiry`), not from it."""

    __slots__ = ()

    def set(self, value: Any, ttl_ms: int | None = None) -> None:
        at, self.timestamp = self.timestamp, None
        try:
            super().set(value, ttl_ms)
        finally:
            self.timestamp = at
