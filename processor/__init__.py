"""Exactly-once stream processing on Kafka. Users import `Pipeline` from here, and the types
their functions can be annotated with: `Meta` (``meta=True``), `State` and `Timers`
(``process``), `WindowState` and `Window` (windows); and `Aggregator`, what ``regroup``
keeps per group."""

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
