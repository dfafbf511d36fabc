"""What a user's function gets besides the value: a record's `Meta` (``meta=True``), the
``state`` handle of ``process`` (`State`, `Timers`; `WindowState` on windows), and a result
of ``window(bounds=True)`` (`Window`).

`Meta` is the class the engine builds; `State`, `WindowState` and `Timers` are protocols the
engine's handles meet (`processor.engine.process_op`, `processor.engine.windows`): annotate
a function with them and mypy checks what it calls::

    def dedupe(event: dict[str, Any], state: State[str]) -> list[dict[str, Any]]:
        if state.get() is None:
            state.set(True)
            return [event]
        return []
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypedDict, TypeVar

K = TypeVar("K")
K_co = TypeVar("K_co", covariant=True)
V = TypeVar("V")

Headers = list[tuple[str, bytes | None]]  # None: a header with a null value


class Meta:
    """A record's metadata: what ``fn(value, meta)`` gets with ``meta=True``.

    - ``key``: the Kafka key at a source (decoded with the source's ``key=`` format, else the
      raw bytes, None for a record without one); after a ``key_by``, the stream's key.
    - ``timestamp``: event time in ms (the source's ``timestamp`` function, else the Kafka
      record's timestamp); None after an aggregation of an untimed pipeline.
    - ``headers``: the Kafka headers, a list of ``(name, bytes)`` pairs (``[]`` if none),
      carried through shuffles.
    - ``topic``, ``partition``, ``offset``: of the source record, in a source's stage only;
      None after a shuffle.

    Example::

        p.source("orders", key="text").map(lambda v, meta: (meta.key, v), meta=True)
    """

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic")

    def __init__(
        self,
        key: Any = None,
        timestamp: int | None = None,
        headers: Headers | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.key = key
        self.timestamp = timestamp
        self.headers: Headers = [] if headers is None else headers
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _FIELDS)
        return f"Meta({fields})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Meta):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable


_FIELDS = ("key", "timestamp", "headers", "topic", "partition", "offset")


class Timers(Protocol):
    """``state.timers`` in a ``process`` given ``on_timer``: the current key's timers."""

    def set(self, at_ms: int) -> None:
        """A timer at ``at_ms``; it fires once, when the watermark (or the wall clock, with
        ``processing_time=True``) passes it: is above ``at_ms``, so that every record at
        ``at_ms`` came before (an interval that includes its end closes with a timer at the
        end, not one ms after)."""

    def delete(self, at_ms: int) -> None:
        """Cancel the timer at ``at_ms``, if pending."""

    def clear(self) -> None:
        """Cancel every pending timer of this key."""

    def pending(self) -> list[int]:
        """This key's pending timers, earliest first."""
        ...


class WindowState(Protocol[K_co]):
    """``state`` of a ``process`` on windows: one key's value in one window."""

    @property
    def key(self) -> K_co:
        """The key, as the key_by function returned it (without the window)."""
        ...

    @property
    def timestamp(self) -> int | None:
        """The record's event time in ms."""
        ...

    def get(self, default: Any = None) -> Any:
        """The value set last (``default`` if none)."""

    def set(self, value: Any, ttl_ms: int | None = None) -> None:
        """The key's new value (JSON-encodable)."""

    def delete(self) -> None:
        """The key's value gone: ``get()`` returns the default again."""


class State(WindowState[K_co], Protocol[K_co]):
    """``state`` of a ``process`` on a keyed stream: the current key's value, its record's
    event time and headers, and (with ``on_timer``) its timers.

    ``timestamp`` is None only after an aggregation of a pipeline without event time;
    ``set(value, ttl_ms=...)`` deletes the value once not set for that long. Timers (of a
    ``process(fn, on_timer=...)``) fire once each, calling ``on_timer(at_ms, state)``, and are
    part of the snapshot. A cart that sees no event for 30 s is abandoned (at the end of a
    `processor.testing.run` every timer fires):

    >>> def track(event, state):
    ...     state.set(event)
    ...     state.timers.clear()
    ...     state.timers.set(state.timestamp + 30_000)
    ...     return []
    >>> def expired(at_ms, state):
    ...     return [f"abandoned after {state.get()}"]
    >>> p = Pipeline()
    >>> carts = p.source("carts").key_by(lambda e: e.split(":")[0])
    >>> carts.process(track, on_timer=expired).sink("abandoned")
    >>> run(p, {"carts": [("c1", "c1:add", 0), ("c1", "c1:pay", 10_000), ("c2", "c2:add", 50_000)]})
    {'abandoned': [('c1', 'abandoned after c1:pay'), ('c2', 'abandoned after c2:add')]}
    """

    @property
    def headers(self) -> Headers:
        """The record's Kafka headers (``process(..., headers=True)``)."""
        ...

    @property
    def timers(self) -> Timers:
        """This key's timers (``process(..., on_timer=...)``)."""
        ...


class Window(TypedDict, Generic[K, V]):
    """A result of ``window(..., bounds=True)``: the key, the window ``[start, end)`` in ms,
    and the aggregation's value (or what a windowed ``process`` emitted)."""

    key: K
    start: int
    end: int
    value: V
