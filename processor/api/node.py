"""The graph a `processor.api.streams.Pipeline` records: its `Node`s (one per operator),
the kinds of node, and `PipelineError`, what a pipeline that cannot run raises.

The API (`processor.api.streams`) builds the graph; `processor.plan.stages` splits it into
stages and sets what the planner decides on each node (``timed``, ``meta``, ``meta_in``); the
engine's operators read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from processor.api.targets import PostgresTarget, SinkSpec
from processor.serde import Serde

ValueFormat = Literal["text", "json", "bytes"]
VALUE_FORMATS: tuple[ValueFormat, ...] = ("text", "json", "bytes")
# When an aggregation emits: its latest value per key at each checkpoint, or an update per
# input record.
Emit = Literal["checkpoint", "record"]
EMITS: tuple[Emit, ...] = ("checkpoint", "record")

# Kinds of node. An aggregation ("count", "sum", "reduce", "aggregate") and "process" keep
# state per key; "key_by" is where a stage ends and a shuffle begins. "window" marks the
# operators under it as per-window (it runs none itself); "join" begins a stage with two
# inputs. "loop" is where a loop's fed-back records join its input (`processor.api.loops`).
STATEFUL = frozenset({"count", "sum", "reduce", "aggregate", "process", "join"})
AGGREGATIONS = frozenset({"count", "sum", "reduce", "aggregate"})

# A source channel with no records for this long does not hold the watermark back.
DEFAULT_IDLE_MS = 10_000


@dataclass(eq=False)
class Node:
    """One operator of the graph. ``fn``/``fn2``/``initial`` depend on ``kind``."""

    kind: str
    name: str
    parent: Node | None
    keyed: bool  # its output carries a key
    fn: Callable[..., Any] | None = None
    fn2: Callable[..., Any] | None = None  # aggregate's merge
    initial: Any = None  # aggregate's initial value
    topic: str = ""  # source and sink
    value_format: ValueFormat | Serde = "text"  # source: a built-in's name, or a serde
    sink_spec: SinkSpec | None = None  # sink: its key, value and headers unless the defaults
    postgres: PostgresTarget | None = None  # sink_postgres: its server, table and columns
    # flat_map: the same function over a whole batch (a list of values -> a list of outputs),
    # for functions that are much faster once per batch than once per value (a regex).
    batch_fn: Callable[[list[Any]], Iterable[Any]] | None = None
    children: list[Node] = field(default_factory=list)
    # Event time. source: the timestamp function (None: the Kafka record's timestamp), the
    # out-of-orderness bound, the idle timeout. window: its shape. join: its bound.
    timestamp_fn: Callable[[Any], Any] | None = None
    out_of_orderness_ms: int = 0
    idle_ms: int = DEFAULT_IDLE_MS
    size_ms: int = 0
    slide_ms: int = 0  # hopping (0: tumbling, or a session window when gap_ms is set)
    gap_ms: int = 0  # session windows
    lateness_ms: int = 0
    bounds: bool = False  # window: results as {key, start, end, value}
    within_ms: int | None = 0  # join (None: no time bound)
    other: Node | None = None  # join: the right input's key_by
    # key_by: the loop (kind "loop") its records feed back into (`processor.api.loops`)
    feeds: Node | None = None
    merged: list[Node] = field(default_factory=list)  # merge: the inputs after ``parent``
    # process: the timer callback (`processor.engine.timers`), and whether its timers
    # count in wall-clock ms instead of event time.
    on_timer: Callable[..., Any] | None = None
    processing_time: bool = False
    # Set by the planner: records leaving this node carry their event time.
    timed: bool = False
    emit: Emit = "checkpoint"  # an aggregation's (not a windowed one's)
    # An aggregation's or process's state TTL (0: none; `processor.engine.expiry`).
    ttl_ms: int = 0
    # Record metadata (`processor.engine.meta`). uses_meta: map, filter, flat_map or
    # key_by given meta=True (``fn(value, meta)``). key_format: a source's ``key=``. Set by
    # the planner: meta, records leaving this node carry a Meta; meta_in, it takes them.
    uses_meta: bool = False
    headers: bool | None = None  # process: carries its records' headers (None: if it reads them)
    key_format: Any = None
    meta: bool = False
    meta_in: bool = False

    @property
    def aggregated(self) -> bool:
        """Its output is a changelog of per-key values: one update per key and checkpoint,
        or per input record (`per_record`)."""
        return self.kind in AGGREGATIONS and not self.windowed

    @property
    def inputs(self) -> list[Node]:
        """The nodes whose records enter this one: its parent, and a merge's other inputs."""
        if self.parent is None:
            return []
        return [self.parent, *self.merged]

    @property
    def per_record(self) -> bool:
        """An aggregation that emits an update per input record (``emit="record"``)."""
        return self.emit == "record"

    @property
    def windowed(self) -> bool:
        """An aggregation or process per window: its result is emitted once per window."""
        return self.parent is not None and self.parent.kind == "window"

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"
