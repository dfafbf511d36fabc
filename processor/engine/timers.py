"""Timers of a ``process`` operator: ``state.timers`` per key, fired by the chain.

A key's timers are a set of times (ms): event time, or wall-clock time with
``processing_time=True``. Setting the same time twice is one timer. `StageChain` fires them
in rounds: when the watermark rises (`StageChain.advance`; a timer at ``t`` is due once the
watermark is above ``t``, so every record at ``t`` came first) or the clock is read
(`StageChain.tick`). A round fires its due timers in (time, key) order, each one leaving
``pending()`` just before ``on_timer`` is called; a timer set during a round for a time it
covered already fires in the next round (a callback re-setting its own timer cannot loop).

They are state: each key's pending times are stored under ``<operator>/timers\\0<key>``
(a sorted JSON list; ``/`` is in no operator name, so no operator's keys collide with it)
and written at flush with the epoch's other state, a fired timer's deletion in the same
write as the state its callback changed, in the epoch whose transaction carries its output.
After a restore they are rebuilt from the state (`restore_timers`); the in-memory set is
then complete, and the state is only written.

Pure: no clock and no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from processor.api.node import ProcessNode
from processor.api.streams import Node
from processor.models.limits import EVENT_TIME_LIMIT
from processor.serde.codec import RecordError, shown

SUFFIX = "/timers"


def timers_name(node: Node) -> str:
    """The operator name the timers of ``node`` are stored under."""
    return node.name + SUFFIX


def timers_prefix(node: Node) -> bytes:
    """Where the timers of a ``process`` with ``on_timer`` are stored, per key."""
    return f"{timers_name(node)}\0".encode()


class ProcessTimers:
    """Every key's timers of one ``process`` operator, and the heap that finds the due ones.

    The heap may hold stale entries (a timer deleted, or set twice): an entry fires only if
    its time is still in the key's set, so a stale one does nothing."""

    def __init__(self, node: ProcessNode) -> None:
        self.node = node
        self.processing_time = node.processing_time
        # What `StageChain.inherit` sets on every timed operator (lateness floors from a
        # savepoint): timers have no lateness, so it is never read.
        self.floor: Any = None
        self._keys: dict[str, set[int]] = {}
        self._heap: list[tuple[int, str]] = []
        self._live = 0  # timers in all the sets
        self._changed: set[str] = set()  # keys whose timers the next flush writes

    def of(self, text: str) -> Timers:
        """``state.timers`` for the key whose text is ``text``."""
        return Timers(self, text)

    def set(self, text: str, at_ms: Any) -> None:
        at = _time(at_ms)
        times = self._keys.setdefault(text, set())
        if at in times:
            return
        times.add(at)
        self._live += 1
        self._changed.add(text)
        heapq.heappush(self._heap, (at, text))
        if len(self._heap) > 2 * self._live + 1024:
            self._compact()

    def delete(self, text: str, at_ms: Any) -> None:
        times = self._keys.get(text)
        at = _time(at_ms)
        if times is None or at not in times:
            return
        times.discard(at)
        self._live -= 1
        self._changed.add(text)
        if not times:
            del self._keys[text]

    def clear(self, text: str) -> None:
        times = self._keys.pop(text, None)
        if times:
            self._live -= len(times)
            self._changed.add(text)

    def pending(self, text: str) -> list[int]:
        return sorted(self._keys.get(text, ()))

    def due(self, through: int) -> list[tuple[int, str]]:
        """A round: the (time, key text) of the timers at or below ``through``, in order, off
        the heap. Fire each with `take`; one taken or deleted meanwhile is skipped there."""
        heap, out = self._heap, dict[tuple[int, str], None]()
        while heap and heap[0][0] <= through:
            out[heapq.heappop(heap)] = None
        return list(out)

    def take(self, at: int, text: str) -> bool:
        """Remove timer ``at`` of key ``text`` to fire it: False if it is not pending."""
        times = self._keys.get(text)
        if times is None or at not in times:
            return False
        self.delete(text, at)
        return True

    def take_writes(self) -> dict[str, list[int] | None]:
        """Per key whose timers changed since the last call: its sorted times (None: none
        left, delete the stored ones)."""
        changed, self._changed = self._changed, set()
        return {text: self.pending(text) or None for text in changed}

    def restore_timers(self, items: Iterable[tuple[str, Any]]) -> None:
        """The stored timers (key text, decoded value) after a restore; nothing to write."""
        for text, times in items:
            if not isinstance(times, list):
                continue
            for at in times:
                if type(at) is int:
                    self.set(text, at)
        self._changed.clear()

    def _compact(self) -> None:
        """The heap rebuilt from the sets: stale entries (deleted timers) dropped."""
        self._heap = [(at, text) for text, times in self._keys.items() for at in times]
        heapq.heapify(self._heap)


class Timers:
    """``state.timers`` in ``process``: the timers of the current key.

    Event-time timers fire once the watermark passes their time; processing-time ones
    (``process(..., processing_time=True)``) once the wall clock does."""

    __slots__ = ("_op", "_text")

    def __init__(self, op: ProcessTimers, text: str) -> None:
        self._op, self._text = op, text

    def set(self, at_ms: int) -> None:
        """A timer at ``at_ms`` (ms) for this key; setting one that is pending does nothing.

        >>> state.timers.set(state.timestamp + 30_000)  # doctest: +SKIP
        """
        self._op.set(self._text, at_ms)

    def delete(self, at_ms: int) -> None:
        """Cancel the timer at ``at_ms``, if pending.

        >>> state.timers.delete(at_ms)  # doctest: +SKIP
        """
        self._op.delete(self._text, at_ms)

    def clear(self) -> None:
        """Cancel every pending timer of this key.

        >>> state.timers.clear()  # doctest: +SKIP
        """
        self._op.clear(self._text)

    def pending(self) -> list[int]:
        """This key's pending timers, earliest first (a firing one is not pending).

        >>> if not state.timers.pending(): ...  # doctest: +SKIP
        """
        return self._op.pending(self._text)


def _time(at_ms: Any) -> int:
    """A timer's time as int ms; RecordError (a dead record) for anything else."""
    if type(at_ms) is not int and type(at_ms) is not float:
        raise RecordError(f"timer time {shown(at_ms, 40)} is not a number of ms")
    if not -EVENT_TIME_LIMIT < at_ms < EVENT_TIME_LIMIT:  # NaN and inf too
        raise RecordError(f"timer time {shown(at_ms, 40)} is out of range")
    return int(at_ms)
