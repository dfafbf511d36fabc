"""Exactly-once stream processing on Kafka. Users import `Pipeline` from here, and the types
their functions can be annotated with: `Meta` (``meta=True``), `State` and `Timers`
(``process``), `WindowState` and `Window` (windows); and `Aggregator`, what ``regroup``
keeps per group.

The names are imported when first asked for (PEP 562): a process that runs no pipeline code
(a task's snapshot process, the CLI's commands) does not pay the API's imports at start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from processor.api.context import Meta, State, Timers, Window, WindowState
    from processor.api.streams import (
        BoundedWindowedStream,
        KeyedStream,
        Pipeline,
        PipelineError,
        Stream,
        WindowedStream,
    )
    from processor.api.tables import Aggregator

_HOMES = {
    "Meta": "processor.api.context",
    "State": "processor.api.context",
    "Timers": "processor.api.context",
    "Window": "processor.api.context",
    "WindowState": "processor.api.context",
    "BoundedWindowedStream": "processor.api.streams",
    "KeyedStream": "processor.api.streams",
    "Pipeline": "processor.api.streams",
    "PipelineError": "processor.api.streams",
    "Stream": "processor.api.streams",
    "WindowedStream": "processor.api.streams",
    "Aggregator": "processor.api.tables",
}

__all__ = [
    "Aggregator",
    "BoundedWindowedStream",
    "KeyedStream",
    "Meta",
    "Pipeline",
    "PipelineError",
    "State",
    "Stream",
    "Timers",
    "Window",
    "WindowState",
    "WindowedStream",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'processor' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
