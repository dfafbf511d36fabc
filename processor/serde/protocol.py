"""`Serde`, what a format is: the protocol every serde meets, below the modules that use it."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

V = TypeVar("V")


@runtime_checkable
class Serde(Protocol):
    """What a format is: bytes to a value and back."""

    def loads(self, raw: bytes) -> Any: ...

    def dumps(self, value: Any) -> bytes: ...


class TypedSerde(Protocol[V]):
    """A serde whose values are of type ``V``: a source reading with it is a ``Stream[V]``.

    ::

        class Clicks:
            def loads(self, raw: bytes) -> Click: ...
            def dumps(self, value: Click) -> bytes: ...
    """

    def loads(self, raw: bytes) -> V: ...

    def dumps(self, value: V) -> bytes: ...
