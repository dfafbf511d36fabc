"""``process`` (not per window: those are `processor.engine.operators.windowed.Window`):
record by record with a state handle per key (`processor.engine.process_op.KeyState`), its
output on at once, keeping the time.

The operator owns what the handle acts on: its epoch cache (key text -> value,
`process_op.DELETED` for a deleted key), written at `Process.flush`; with an ``on_timer``
its timers (`processor.engine.timers`), fired by the watermark (`Process.advance`) or the
clock (`Process.fire_timers`); and its keys' TTL deadlines (``expiry``:
``state.set(value, ttl_ms=...)`` may come, with or without its ``ttl_ms``).

Its input is keyed: ``(key text, value)``, ``((key text, event time), value)`` in a timed
stage, ``((key text, meta), value)`` where it takes metadata (``Node.meta_in``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from processor.api.node import ProcessNode
from processor.api.ops import UNSET, key_of
from processor.engine.context import StageContext
from processor.engine.expiry import expiry_of
from processor.engine.operators.base import Operator
from processor.engine.process_op import DELETED, ClockTimerState, Fn, KeyState
from processor.engine.state_keys import state_prefix
from processor.engine.time import NO_WATERMARK
from processor.engine.timers import ProcessTimers, timers_prefix
from processor.serde.codec import sink_value

Writes = dict[bytes, bytes | None]  # the epoch's state write: key -> value (None: deleted)


class Process(Operator):
    """``process`` over a keyed stream (see the module). ``mark``: the watermark of its input
    where it has event-time timers (set by `processor.engine.stage_time.EventTime`)."""

    __slots__ = ("cache", "expiry", "fn", "handle", "load", "mark", "meta", "timed", "timers")

    node: ProcessNode

    def __init__(self, ctx: StageContext, node: ProcessNode) -> None:
        super().__init__(ctx, node)
        self.fn: Fn = node.fn
        self.cache: dict[str, Any] = {}
        self.load = partial(ctx.load, node)
        self.timers = ProcessTimers(node) if node.on_timer is not None else None
        self.expiry = expiry_of(node, ctx.timed)
        self.meta, self.timed = node.meta_in, node.timed
        self.mark = NO_WATERMARK
        # One handle, bound to each record's key in turn.
        self.handle = KeyState(self.cache, "", self.load, None, self.timers, self.expiry)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(self.run(batch), quiet)

    def run(self, batch: list[Any]) -> list[Any]:
        """The function over ``batch``; its output ``(key text, value)``, or ``((key text,
        event time), value)`` in a timed stage, keeping each record's time."""
        run = self.handle.run_meta if self.meta else self.handle.run
        return run(self.fn, batch, self.timed, self.ctx.fail, self.node)

    def advance(self, mark: int, quiet: bool) -> None:
        """Its input's watermark rose to ``mark``: the event-time timers it passed fire, their
        output at least at the watermark before."""
        before, self.mark = self.mark, mark
        self.fire_timers(mark - 1, before, quiet)

    def fire_timers(
        self, through: int, low: int | None, quiet: bool, event_time: bool = True
    ) -> None:
        """A round of its timers (those at or below ``through``): ``on_timer`` for each, its
        output on to the children. Event time of the output in a timed stage (``low`` not
        None): the timer's time, at least ``low`` (the watermark before this round), so that
        none is behind a watermark forwarded already; a processing-time timer's output has
        ``low``."""
        timers, on_timer, node = self.timers, self.node.on_timer, self.node
        assert timers is not None and on_timer is not None
        due = timers.due(through)
        if not due:
            return
        state = KeyState if event_time else ClockTimerState
        out: list[Any] = []
        for at, text in due:
            if not timers.take(at, text):
                continue  # deleted, or fired already this round
            handle = state(self.cache, text, self.load, at, timers, self.expiry, headers=[])
            try:
                emitted = list(on_timer(at, handle))
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self.ctx.fail(node, exc, {"timer": at, "key": key_of(text)})
                continue
            if low is None:
                first: Any = text
            else:
                first = (text, max(at, low) if event_time else low)
            out.extend((first, e) for e in emitted)
        if out:
            self.emit(out, quiet)

    def flush(self, writes: Writes) -> None:
        """The cache into ``writes`` (a deleted key as a deletion), and the timers."""
        prefix, node = state_prefix(self.node), self.node
        kept: list[tuple[str, Any]] = []
        for text, value in self.cache.items():
            if value is DELETED:
                writes[prefix + text.encode()] = None
            elif value is not UNSET:
                kept.append((text, value))
        for (text, _), raw in zip(kept, self.ctx.encode_all(node, kept), strict=True):
            if raw is not None:
                writes[prefix + text.encode()] = raw
        self.cache.clear()
        if self.timers is not None:
            prefix = timers_prefix(node)
            for text, times in self.timers.take_writes().items():
                writes[prefix + text.encode()] = None if times is None else sink_value(times)

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of the cache (their timers stay: they are the user's)."""
        del quiet
        cache = self.cache
        for text in texts:
            cache.pop(text, None)

    def held(self, text: str) -> Any:
        """The key's value of this epoch (`UNSET`: not in memory; `DELETED`: deleted)."""
        return self.cache.get(text, UNSET)
