"""`Serde`, what a format is: the protocol every serde meets, below the modules that use it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Serde(Protocol):
    """What a format is: bytes to a value and back."""

    def loads(self, raw: bytes) -> Any: ...

    def dumps(self, value: Any) -> bytes: ...
