"""State TTL: the expiry deadlines of one operator's keys (``ttl_ms=`` of count, sum,
reduce, aggregate and process; ``state.set(value, ttl_ms=...)``).

A key updated is *pending* (`touch`) until the chain stamps it (`stamp`): its deadline is
the time of the update plus its TTL. In a pipeline with event time that time is the event
time of the latest record that updated it (an out-of-order record does not move it back),
and the TTL the latest update's (a shorter one shortens the deadline, as with the clock);
keys expire in `StageChain.advance`, once the watermark reaches their deadline: where they
expire depends on the records alone, so a replay deletes exactly what the first
run deleted. (An update without a record time, by an aggregation's output in the same stage,
counts from the watermark it came under.) Otherwise the time is the wall clock of the
checkpoint that stamps the key, and keys expire at checkpoints.

Deadlines are kept as timers are (`processor.engine.timers`): a heap of (deadline, key)
finds the due ones (`due`) without looking at the others, so expiry never scans the state.
Each key's deadline is stored under ``<operator>/ttl\\0<key>`` (``{"deadline": ms}``, with
``"ttl"`` where the key's TTL is not the operator's, or
``{"ttl_ms": ms}`` for a key updated before the first watermark, stamped when it comes),
written at flush with the epoch's other state, and the heap is rebuilt from them after a
restore (`restore_timers`, as the chain rebuilds timers) and goes with the key into a
rescaled savepoint.

Pure: no clock and no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from processor.api.node import PerKeyNode, ProcessNode
from processor.api.streams import Node
from processor.serde.codec import RecordError, shown

SUFFIX = "/ttl"


def ttl_prefix(node: Node) -> bytes:
    """Where the deadlines of ``node``'s keys are stored, per key."""
    return f"{node.name}{SUFFIX}\0".encode()


def checked_ttl(ttl_ms: Any) -> int:
    """``state.set(..., ttl_ms=)``: a positive int of ms; RecordError (a dead record) else."""
    if type(ttl_ms) is not int or ttl_ms < 1:
        raise RecordError(f"state.set(ttl_ms={shown(ttl_ms, 40)}): expected a positive int of ms")
    return ttl_ms


class Expiry:
    """Every key's deadline of one operator, and the heap that finds the due ones.

    The heap may hold stale entries (a key stamped again, or forgotten): an entry is due only
    if its deadline is still the key's."""

    def __init__(self, node: PerKeyNode, event_time: bool) -> None:
        """``event_time``: deadlines from the records' event times, expired by watermarks."""
        self.node = node
        self.event_time = event_time
        self.ttl_ms = node.ttl_ms  # the operator's; 0: only per-key ones (state.set)
        # Whether any key may have a deadline: a process without ttl_ms= has none until a
        # state.set(ttl_ms=...), and until then its handle need not tell this of each set.
        self.active = node.ttl_ms > 0
        self.floor: Any = None  # `StageChain.inherit` sets it on every timed operator
        self._deadlines: dict[str, int] = {}
        # Keys updated since the last stamp: with their TTL, to count from the time of the
        # stamp (the wall clock, or the watermark they were updated under) ...
        self._pending: dict[str, int] = {}
        # ... or, updated by records with an event time: the latest record's time, and the
        # TTL of the latest update (a shorter one shortens the deadline, as with the clock).
        self._at: dict[str, tuple[int, int]] = {}
        # The TTL of a key's deadline where it is not the operator's (a state.set(ttl_ms=)):
        # what tells the latest record's time from the deadline, for the next update.
        self._ttls: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        self._changed: set[str] = set()  # keys whose stored deadline the next flush writes

    def touch(self, text: str, ttl_ms: int | None = None, at: int | None = None) -> None:
        """The key was updated (by a record of event time ``at``): its TTL ``ttl_ms`` (None:
        the operator's) counts from now; without either it has none any more."""
        ttl = ttl_ms or self.ttl_ms
        if not ttl:
            self.forget(text)
            return
        self.active = True
        if at is None or not self.event_time:
            self._pending[text] = ttl
        else:  # the latest record's time counts: an out-of-order one does not move it back
            latest = self._at.get(text)
            self._at[text] = (at if latest is None else max(at, latest[0]), ttl)

    def touch_all(self, texts: Iterable[str]) -> None:
        """Keys updated, with the operator's TTL (an aggregation's batch)."""
        pending, ttl = self._pending, self.ttl_ms
        for text in texts:
            pending[text] = ttl

    def touch_timed(self, items: Iterable[tuple[str, int]]) -> None:
        """Keys updated by records of these event times, with the operator's TTL."""
        at, ttl = self._at, self.ttl_ms
        get = at.get
        for text, time in items:
            latest = get(text)
            if latest is None or latest[0] < time or latest[1] != ttl:
                at[text] = (time if latest is None else max(time, latest[0]), ttl)

    def forget(self, text: str) -> None:
        """The key was deleted, or set without a TTL: no deadline."""
        pending, at = self._pending.pop(text, None), self._at.pop(text, None)
        self._ttls.pop(text, None)
        if self._deadlines.pop(text, None) is not None or pending or at is not None:
            self._changed.add(text)

    def stamp(self, now: int | None) -> None:
        """Deadlines for the keys updated since the last stamp: by their records' event
        times, and (unless ``now`` is None) the others' from ``now``."""
        for text, (time, ttl) in self._at.items():
            old = self._deadlines.get(text)
            if old is not None:  # an out-of-order record keeps the later time
                time = max(time, old - self._ttls.get(text, self.ttl_ms))
            self._set(text, time + ttl, ttl)
        self._at.clear()
        if now is None:
            return
        for text, ttl in self._pending.items():
            self._set(text, now + ttl, ttl)
        self._pending.clear()
        if len(self._heap) > 2 * len(self._deadlines) + 1024:  # stale entries dropped
            self._heap = [(d, t) for t, d in self._deadlines.items()]
            heapq.heapify(self._heap)

    def _set(self, text: str, deadline: int, ttl: int) -> None:
        if ttl != self.ttl_ms:
            self._ttls[text] = ttl
        else:
            self._ttls.pop(text, None)
        if self._deadlines.get(text) != deadline:
            self._deadlines[text] = deadline
            heapq.heappush(self._heap, (deadline, text))
            self._changed.add(text)

    def hold(self) -> None:
        """The keys updated before the first watermark are stored as pending (`take_writes`):
        the watermark that stamps them may come after a restore."""
        self._changed.update(self._pending)

    def due(self, now: int) -> list[str]:
        """The keys whose deadline is at or below ``now``, off the heap and without a
        deadline any more: delete them."""
        heap, deadlines, out = self._heap, self._deadlines, []
        while heap and heap[0][0] <= now:
            deadline, text = heapq.heappop(heap)
            if deadlines.get(text) == deadline:
                del deadlines[text]
                self._ttls.pop(text, None)
                self._changed.add(text)
                out.append(text)
        return out

    def take_writes(self) -> dict[str, dict[str, int] | None]:
        """Per key whose deadline changed since the last call: what to store (None: delete
        the stored one)."""
        changed, self._changed = self._changed, set()
        out: dict[str, dict[str, int] | None] = {}
        for text in changed:
            deadline = self._deadlines.get(text)
            if deadline is not None:
                ttl = self._ttls.get(text)
                out[text] = (
                    {"deadline": deadline} if ttl is None else {"deadline": deadline, "ttl": ttl}
                )
            elif text in self._pending:  # updated before the first watermark: stamped later
                out[text] = {"ttl_ms": self._pending[text]}
            else:
                out[text] = None
        return out

    def restore_timers(self, items: Iterable[tuple[str, Any]]) -> None:
        """The stored deadlines (key text, decoded value) after a restore; nothing to write."""
        for text, stored in items:
            if not isinstance(stored, dict):
                continue
            deadline, ttl = stored.get("deadline"), stored.get("ttl_ms")
            if type(deadline) is int:
                self._deadlines[text] = deadline
                self._heap.append((deadline, text))
                if type(stored.get("ttl")) is int and stored["ttl"] > 0:
                    self._ttls[text] = stored["ttl"]
            elif type(ttl) is int and ttl > 0:
                self._pending[text] = ttl
            else:
                continue
            self.active = True
        heapq.heapify(self._heap)
        self._changed.clear()


def expiry_of(node: PerKeyNode, event_time: bool) -> Expiry | None:
    """The deadlines of ``node``'s operator, if it may expire keys: an aggregation with
    ``ttl_ms`` and every ``process`` on a keyed stream (``state.set(value, ttl_ms=...)`` may
    come); not one per window. ``event_time``: the stage's records have event times."""
    if not node.windowed and (node.ttl_ms or isinstance(node, ProcessNode)):
        return Expiry(node, event_time)
    return None


def untimed(node: Node, expiry: Expiry | None) -> Expiry | None:
    """The TTL of an aggregation whose records come without their event time: touched as
    they fold (those with it are touched by the operator's input adapter,
    `processor.engine.operators.stateless.StripTimeTouch`)."""
    assert node.parent is not None
    return None if node.parent.timed else expiry
