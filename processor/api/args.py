"""Checks of the arguments users give the pipeline API: one line each when they are wrong."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from processor.api.node import EMITS, Emit, ValueFormat
from processor.errors import PipelineError

if TYPE_CHECKING:
    from processor.serde import Serde


def check_emit(emit: Any, what: str) -> Emit:
    if emit not in EMITS:
        raise PipelineError(f"{what}(emit={emit!r}): emit must be one of {EMITS}")
    return emit  # type: ignore[no-any-return]


def check_serde(spec: Any, where: str, topic: str) -> ValueFormat | Serde:
    """A serde given for a source; a built-in one by its name (the engine's own fast path)."""
    from processor.serde import Builtin, resolve

    serde = resolve(spec, where, topic)
    return serde.name if isinstance(serde, Builtin) else serde


def check_ms(value: Any, what: str, positive: bool = False) -> int:
    if type(value) is not int or value < (1 if positive else 0):
        raise PipelineError(
            f"{what}: expected a {'positive' if positive else 'non-negative'} "
            f"number of milliseconds, got {value!r}"
        )
    return value


def check_flag(meta: Any) -> bool:
    if type(meta) is not bool:
        raise PipelineError(f"meta={meta!r}: expected True or False")
    return meta


def check_callable(fn: Any, what: str) -> Callable[..., Any]:
    if not callable(fn):
        raise PipelineError(f"{what}: expected a function, got {type(fn).__name__}")
    return fn  # type: ignore[no-any-return]


def check_ttl(ttl_ms: Any, what: str) -> int:
    """A state TTL: None (none, 0 on the node) or a positive int of ms."""
    if ttl_ms is None:
        return 0
    return check_ms(ttl_ms, f"{what}(ttl_ms={ttl_ms!r})", positive=True)
