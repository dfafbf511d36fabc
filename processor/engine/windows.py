"""Event-time operators with timers: windowed aggregations and the stream-stream join.

Both keep one state value per key and operator (``<operator>\\0<key>`` like every other
operator, so savepoints redistribute them by key): a window operator the open windows of the
key, a join the records of both sides still young enough to match. Both act when the task's
watermark rises (`fire`): a window whose end plus lateness the watermark passed emits its
result once and is deleted; join records that can match nothing any more are dropped.

A window's result has the event time of its end - 1 but comes later than the watermark that
passes it when the window has lateness (`WindowOperator.output_mark`: how far the watermark of
what it feeds is held back, so that none of its results is late there).

Timers are an in-memory heap of (time, key): rebuilt from the state on restore, never stored.
An entry may be stale (the window merged or fired already); firing looks at the state, so a
stale entry does nothing.

Pure: state through a load function and the `writes` of each epoch, as in `StageChain`.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

from processor.api.node import AggregationNode, CountNode, JoinNode, PerKeyNode, ProcessNode
from processor.api.ops import UNSET, folder, key_of, key_text, merger, sink_key_of
from processor.api.streams import Node
from processor.engine.time import NO_WATERMARK
from processor.serde.codec import RecordError

# A timed keyed item: ((key text, event time ms), value).
Item = tuple[tuple[str, int], Any]
DELETED = object()


class _Timed:
    """Per-key state cached for the epoch, and timers."""

    def __init__(self, node: Node, load: Callable[[str], Any]) -> None:
        self.node = node
        self._load = load
        self._cache: dict[str, Any] = {}  # key text -> state (a dict), or DELETED
        self._timers: list[tuple[int, str]] = []
        # After a savepoint: key text -> the watermark its old task had reached, which the
        # lateness test also respects (`processor.engine.floors`); None once passed.
        self.floor: Callable[[str], int] | None = None

    def _get(self, text: str) -> dict[str, Any]:
        state = self._cache.get(text, UNSET)
        if state is UNSET:
            state = self._cache[text] = self._load(text)
        if state is UNSET or state is DELETED:
            state = self._cache[text] = {}
        return state  # type: ignore[no-any-return]

    def _store(self, text: str, state: dict[str, Any]) -> None:
        self._cache[text] = state if state else DELETED

    def _timer(self, at: int, text: str) -> None:
        heapq.heappush(self._timers, (at, text))

    def due(self, watermark: int) -> list[str]:
        """Keys with a timer at or below ``watermark`` (each once; the timers are gone)."""
        timers, keys = self._timers, dict[str, None]()
        while timers and timers[0][0] <= watermark:
            keys[heapq.heappop(timers)[1]] = None
        return list(keys)

    def held(self, text: str) -> Any:
        """The key's state of this epoch, in memory (`UNSET`: not; DELETED: deleted). Read
        from a request thread: one dict lookup (`processor.engine.live_state`)."""
        return self._cache.get(text, UNSET)

    def take_writes(self) -> dict[str, Any]:
        """The epoch's changed state by key text (DELETED: delete it); the cache is empty
        after."""
        cache, self._cache = self._cache, {}
        return cache

    def restore_timers(self, items: Iterable[tuple[str, Any]]) -> None:
        """Timers for stored state (key text, decoded value) after a restore."""
        for text, state in items:
            if isinstance(state, dict):
                at = self._next_timer(state)
                if at is not None:
                    self._timer(at, text)

    def _next_timer(self, state: dict[str, Any]) -> int | None:
        raise NotImplementedError


class WindowOperator(_Timed):
    """An aggregation or ``process`` per window (``node.parent`` is the window node).

    State per key: ``{"<start>": acc}`` (tumbling, hopping), ``{"<start>": [end, acc]}``
    (sessions), ``{"<start>": state}`` (process).
    """

    def __init__(
        self,
        node: PerKeyNode,
        load: Callable[[str], Any],
        dead: Callable[[Node, Exception, Any], None],
    ) -> None:
        super().__init__(node, load)
        window = node.window
        assert window is not None
        self.size, self.slide = window.size_ms, window.slide_ms or window.size_ms
        self.gap, self.lateness = window.gap_ms, window.lateness_ms
        self._dead = dead
        # A process's function, else the aggregation's fold (and merge, of sessions).
        self._fn = node.fn if isinstance(node, ProcessNode) else None
        self._process = self._fn is not None
        aggregation = node if isinstance(node, AggregationNode) else None
        self._fold = None if aggregation is None else folder(aggregation)
        self._count = isinstance(aggregation, CountNode)
        self._merge = merger(aggregation) if self.gap and aggregation is not None else None
        self._bounds = window.bounds

    def output_mark(self, watermark: int) -> int:
        """The watermark of this operator's output when its input's is ``watermark``: no
        result it emits from now on has an earlier event time.

        A result's event time is its window's end - 1, and windows take records while the
        watermark is below their end plus the lateness (a ``process`` window emits at once,
        an aggregation when the watermark passes that). So with lateness every window that
        ends above ``watermark - lateness`` may still emit, also one that a record up to the
        lateness behind the watermark has yet to open: the earliest is the first such end."""
        if not self.lateness or watermark <= NO_WATERMARK:
            return watermark  # every window still to emit ends above the watermark
        low = watermark - self.lateness
        if self.gap:
            return low  # a session can end anywhere: at low + 1 at the earliest
        # Ends are start + size with the starts multiples of the slide.
        end = low + 1 + (self.size - low - 1) % self.slide
        return min(watermark, end - 1)

    def _starts(self, ts: int) -> list[int]:
        """Starts of the tumbling or hopping windows ``[start, start + size)`` holding ``ts``."""
        last = ts - ts % self.slide
        return list(range(last, ts - self.size, -self.slide))

    def _next_timer(self, state: dict[str, Any]) -> int | None:
        if not state:
            return None
        if self.gap:
            return min(int(v[0]) for v in state.values()) + self.lateness
        return min(int(s) for s in state) + self.size + self.lateness

    def add(self, batch: list[Item], watermark: int, late: list[Item]) -> list[Item]:
        """Records into their windows; those only for windows closed already into ``late``.
        Returns what ``process`` emits at once (aggregations emit at `fire`)."""
        if self.gap:
            for item in batch:
                self._session(item, watermark, late)
            return []
        if self._fold is not None and self.floor is None and self.size % self.slide == 0:
            self._fold_all(batch, watermark, late)
            return []
        out: list[Item] = []
        fold, lateness, size, floor = self._fold, self.lateness, self.size, self.floor
        for item in batch:
            (text, ts), value = item
            closed = watermark if floor is None else max(watermark, floor(text))
            starts = [s for s in self._starts(ts) if s + size + lateness > closed]
            if not starts:
                late.append(item)
                continue
            state = self._get(text)
            for start in starts:
                slot = str(start)
                fresh = slot not in state
                try:
                    if fold is not None:
                        state[slot] = fold(state.get(slot, UNSET), value)
                    else:
                        out.extend(self._call(text, state, slot, start, value, ts))
                except Exception as exc:  # noqa: BLE001 - a user function's failure: dead
                    self._dead(self.node, exc, value)
                    if fresh:
                        state.pop(slot, None)
                    break
                if fresh:
                    self._timer(start + size + lateness, text)
            self._store(text, state)
        return out

    def _fold_all(self, batch: list[Item], watermark: int, late: list[Item]) -> None:
        """`add` for an aggregation on windows whose size is a multiple of their slide (and
        no savepoint floor): every record of one slide-long span falls into the same
        windows, found once per span and batch; a count adds in place. As `add`: a record
        only for closed windows is late, a fold that raises leaves the record dead (and the
        windows it went into before that keep it)."""
        size, slide, lateness, fold = self.size, self.slide, self.lateness, self._fold
        assert fold is not None
        count = self._count
        get, store, timer = self._get, self._store, self._timer
        spans: dict[int, list[tuple[str, int]]] = {}  # a span's start -> its open windows
        for item in batch:
            (text, ts), value = item
            first = ts - ts % slide
            windows = spans.get(first)
            if windows is None:
                windows = spans[first] = [
                    (str(start), start + size + lateness)
                    for start in range(first, first - size, -slide)
                    if start + size + lateness > watermark
                ]
            if not windows:
                late.append(item)
                continue
            state = get(text)
            for slot, closes in windows:
                held = state.get(slot, UNSET)
                try:
                    if count:
                        state[slot] = 1 if held is UNSET else held + 1
                    else:
                        state[slot] = fold(held, value)
                except Exception as exc:  # noqa: BLE001 - a user function's failure: dead
                    self._dead(self.node, exc, value)
                    break
                if held is UNSET:
                    timer(closes, text)
            store(text, state)

    def _call(
        self, text: str, state: dict[str, Any], slot: str, start: int, value: Any, ts: int
    ) -> list[Item]:
        """``process`` on one window: its state is ``state[slot]`` (None: not set)."""
        assert self._fn is not None
        handle = _WindowState(state, slot, text, ts)
        emitted = list(self._fn(value, handle))
        if slot not in state:
            state[slot] = None  # the window is open (a timer closes it) even without state
        if not emitted:
            return []
        result = self._window_key(sink_key_of(text).decode(), start)
        at = start + self.size - 1
        if self._bounds:
            return [((result, at), self._bounded(text, start, at + 1, e)) for e in emitted]
        return [((result, at), e) for e in emitted]

    def _session(self, item: Item, watermark: int, late: list[Item]) -> None:
        (text, ts), value = item
        assert self._fold is not None and self._merge is not None
        state = self._get(text)
        start, end = ts, ts + self.gap
        merged: list[str] = []
        for slot, (other_end, _) in state.items():
            if int(slot) < end and start < other_end:  # they overlap: one session
                merged.append(slot)
                start, end = min(start, int(slot)), max(end, int(other_end))
        floor = self.floor
        closed = watermark if floor is None else max(watermark, floor(text))
        if end + self.lateness <= closed:
            late.append(item)  # even merged, its session closed already
            return
        try:
            acc = self._fold(UNSET, value)
            for slot in merged:
                acc = self._merge(acc, state[slot][1])
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead
            self._dead(self.node, exc, value)
            return
        for slot in merged:
            del state[slot]
        state[str(start)] = [end, acc]
        self._timer(end + self.lateness, text)
        self._store(text, state)

    def fire(self, watermark: int) -> list[Item]:
        """Close the windows the watermark passed: their results (in a replay too: what
        follows the window rebuilds its state from them, and sinks drop them)."""
        out: list[Item] = []
        gap, size, lateness = self.gap, self.size, self.lateness
        results = not self._process
        for text in self.due(watermark):
            state = self._get(text)
            closed = []
            for slot, held in state.items():
                end = int(held[0]) if gap else int(slot) + size
                if end + lateness <= watermark:
                    closed.append((int(slot), slot, end, held))
            if not closed:
                continue
            if len(closed) > 1:
                closed.sort(key=itemgetter(0))
            name = sink_key_of(text).decode() if results else ""  # once per key, not window
            for start, slot, end, held in closed:
                del state[slot]
                if results:
                    acc = held[1] if gap else held
                    if self._bounds:
                        acc = self._bounded(text, start, end, acc)
                    out.append(((self._window_key(name, start), end - 1), acc))
            self._store(text, state)
            nxt = self._next_timer(state)
            if nxt is not None:
                self._timer(nxt, text)
        return out

    @staticmethod
    def _bounded(text: str, start: int, end: int, value: Any) -> dict[str, Any]:
        """A result with its key and window ``[start, end)`` (``window(bounds=True)``)."""
        return {"key": key_of(text), "start": start, "end": end, "value": value}

    @staticmethod
    def _window_key(name: str, start: int) -> str:
        """A result's key: its key's sink text (``sink_key_of(text).decode()``) @ start."""
        return key_text(f"{name}@{start}")


class _WindowState:
    """``process``'s state handle for one key and window; ``timestamp``: the record's event
    time."""

    __slots__ = ("_slot", "_state", "_text", "timestamp")

    def __init__(self, state: dict[str, Any], slot: str, text: str, timestamp: int) -> None:
        self._state, self._slot, self._text, self.timestamp = state, slot, text, timestamp

    @property
    def key(self) -> Any:
        """The key, as the key_by function returned it (without the window)."""
        return key_of(self._text)

    def get(self, default: Any = None) -> Any:
        value = self._state.get(self._slot)
        return default if value is None else value

    def set(self, value: Any, ttl_ms: Any = None) -> None:
        if ttl_ms is not None:
            raise RecordError(
                "state.set(ttl_ms=...) in a process on windows: a window's state is deleted "
                "when the window closes"
            )
        self._state[self._slot] = value  # encoded at the epoch's end (see KeyState.set)

    def delete(self) -> None:
        self._state[self._slot] = None


class JoinOperator(_Timed):
    """Records of both sides per key, ``{"l": [[ts, value], ...], "r": [...]}``, until the
    watermark passes them by more than ``within_ms``.

    A record arriving below the watermark is late: a partner it should meet may be gone
    already (so it meets none, as in Flink's interval join). Any other record meets every
    partner within the bound that came before it, and the ones after it meet it: each pair
    is emitted exactly once, by the later of its two records, ``[left, right]``, with the
    later event time.

    With no bound (``within_ms`` None) no record is late or ever dropped, and there are no
    timers: each record meets every partner of its key before and after it.
    """

    SIDES = ("l", "r")

    def __init__(self, node: JoinNode, load: Callable[[str], Any]) -> None:
        super().__init__(node, load)
        self.within = node.within_ms

    def _next_timer(self, state: dict[str, Any]) -> int | None:
        if self.within is None:
            return None
        times = [int(e[0]) for side in self.SIDES for e in state.get(side, ())]
        return min(times) + self.within + 1 if times else None

    def add(self, side: int, batch: list[Item], watermark: int, late: list[Item]) -> list[Item]:
        mine, theirs = self.SIDES[side], self.SIDES[1 - side]
        within, floor = self.within, self.floor
        out: list[Item] = []
        for item in batch:
            (text, ts), value = item
            if within is not None and ts < (
                watermark if floor is None else max(watermark, floor(text))
            ):
                late.append(item)
                continue
            state = self._get(text)
            for other_ts, other in state.get(theirs, ()):
                if within is None or abs(ts - other_ts) <= within:
                    # A copy: what the user's functions do to the pair must not reach state.
                    other = copy.deepcopy(other)
                    pair = [value, other] if side == 0 else [other, value]
                    out.append(((text, max(ts, other_ts)), pair))
            state.setdefault(mine, []).append([ts, copy.deepcopy(value)])
            if within is not None:
                self._timer(ts + within + 1, text)
            self._store(text, state)
        return out

    def fire(self, watermark: int) -> list[Item]:
        """Drop the records no future record can meet (older than watermark - within)."""
        if self.within is None:
            return []
        horizon = watermark - self.within
        for text in self.due(watermark):
            state = self._get(text)
            for side in self.SIDES:
                kept = [e for e in state.get(side, ()) if e[0] >= horizon]
                if kept:
                    state[side] = kept
                else:
                    state.pop(side, None)
            self._store(text, state)
            nxt = self._next_timer(state)
            if nxt is not None:
                self._timer(nxt, text)
        return []
