"""``process`` in a stage's chain: the state handle a user function gets (`KeyState`), a
batch of records through it (`process_batch`) and a round of its timers (`fire_timers`).

Its operator (`processor.engine.operators.keyed.Process`) owns the epoch cache (key text ->
value, `DELETED` for a deleted key) and the timers (`processor.engine.timers`); these
functions act on them, so that the operator's module holds the dataflow and this one what
``process`` is. The operator owns its keys' TTL deadlines too (``expiry``), which the handle
touches on ``set`` (`processor.engine.ttl`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from processor.api.ops import UNSET, key_of
from processor.api.streams import Node
from processor.engine.expiry import Expiry, checked_ttl
from processor.engine.meta import Headers
from processor.engine.timers import ProcessTimers, Timers
from processor.serde.codec import RecordError

if TYPE_CHECKING:
    from processor.engine.chain import StageChain

DELETED = object()  # a key ``state.delete()`` removed this epoch


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
    ) -> None:
        self._cache, self._text, self._load = cache, text, load
        self.timestamp, self._timers = timestamp, timers
        self._expiry = expiry  # the operator's TTL deadlines (`processor.engine.ttl`)
        # The record's Kafka headers, where the process reads them (`reads_headers`).
        self._headers: Headers | None = None

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

        >>> state.set({"first_seen": state.timestamp}, ttl_ms=86_400_000)  # doctest: +SKIP
        """
        json.dumps(value)  # refuse what cannot be stored, on the record that tried
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


class _ClockTimerState(KeyState):
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


def process_batch(chain: StageChain, node: Node, batch: list[Any]) -> list[Any]:
    """Items ``((key text, meta), value)`` where the process takes metadata (``meta_in``),
    else ``((key text, event time), value)`` in a timed stage and ``(key text, value)`` in
    an untimed one; its output ``(key text, value)``, or ``((key text, event time), value)``
    in a timed stage, keeping each record's time."""
    if not node.meta_in:
        return _process_plain(chain, node, batch)
    fn = node.fn
    assert fn is not None
    op = chain._processes[node]
    cache, timers, load = op.cache, op.timers, op.load
    out: list[Any] = []
    append = out.append
    timed = node.timed
    handle = KeyState(cache, "", load, None, timers, op.expiry)  # bound to each key in turn
    for first, value in batch:
        text, meta = first
        handle._text, handle.timestamp, handle._headers = text, meta.timestamp, meta.headers
        try:
            emitted = list(fn(value, handle))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            chain._dead(node, exc, value)
            continue
        key = (text, meta.timestamp) if timed else text
        for e in emitted:
            append((key, e))
    return out


def _process_plain(chain: StageChain, node: Node, batch: list[Any]) -> list[Any]:
    """`process_batch` of items without metadata."""
    fn = node.fn
    assert fn is not None
    op = chain._processes[node]
    cache, timers, load = op.cache, op.timers, op.load
    out: list[Any] = []
    append = out.append
    timed = node.timed
    # One handle, bound to each record's key in turn (as Flink's keyed state is to the
    # current key): a handle per record cost more than the user's function in a first sight.
    handle = KeyState(cache, "", load, None, timers, op.expiry)
    for first, value in batch:
        if timed:
            handle._text, handle.timestamp = first
        else:
            handle._text = first
        try:
            emitted = list(fn(value, handle))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            chain._dead(node, exc, value)
            continue
        for e in emitted:
            append((first, e))
    return out


def fire_timers(
    chain: StageChain,
    node: Node,
    through: int,
    low: int | None,
    quiet: bool,
    event_time: bool = True,
) -> None:
    """A round of ``node``'s timers (those at or below ``through``): ``on_timer`` for
    each, its output on to the node's children. Event time of the output in a timed stage
    (``low`` not None): the timer's time, at least ``low`` (the watermark before this
    round), so that none is behind a watermark forwarded already; a processing-time
    timer's output has ``low``."""
    op = chain._processes[node]
    timers, on_timer = op.timers, node.on_timer
    assert timers is not None and on_timer is not None
    due = timers.due(through)
    if not due:
        return
    cache, load = op.cache, op.load
    out: list[Any] = []
    for at, text in due:
        if not timers.take(at, text):
            continue  # deleted, or fired already this round
        state = KeyState if event_time else _ClockTimerState
        handle = state(cache, text, load, at, timers, op.expiry)
        handle._headers = []  # a timer has no record
        try:
            emitted = list(on_timer(at, handle))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            chain._dead(node, exc, {"timer": at, "key": key_of(text)})
            continue
        if low is None:
            first: Any = text
        else:
            first = (text, max(at, low) if event_time else low)
        out.extend((first, e) for e in emitted)
    if out:
        chain._push(node, out, quiet)
