"""The graph a `processor.api.streams.Pipeline` records: its nodes, one per operator, each
of a class of its kind holding only its own fields.

`Node` is what every node has (its name, parent, children, whether its output is keyed, and
what the planner decides on it: ``timed``, ``meta``, ``meta_in``); the classes below it are
the kinds. A kind's name (`Node.kind`, a class attribute) is what users see: the status
page, default operator names, errors. Code that asks what a node is asks ``isinstance``, so
that mypy knows its fields.

- `SourceNode`; `MapNode`, `FilterNode`, `FlatMapNode` and `KeyByNode` (`FunctionNode`s: a
  function per value), ``key_by`` being where a stage ends and a shuffle begins;
- `WindowNode`, which marks the operator under it as per-window (it runs none itself);
- the `PerKeyNode`s, with state per key: the aggregations (`AggregationNode`: `CountNode`,
  `SumNode`, `ReduceNode`, `AggregateNode`) and `ProcessNode`;
- `JoinNode`, which begins a stage with two inputs;
- the `UnionNode`s, whose inputs are several: `MergeNode` and `LoopNode`, where a loop's
  fed-back records join its input (`processor.api.loops`);
- `SinkNode` and `PostgresSinkNode`.

The API (`processor.api.streams`) builds the graph; `processor.plan.stages` splits it into
stages and sets the planner's fields; the engine's operators read it when a chain is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from processor.api.targets import PostgresTarget, SinkSpec
from processor.serde import Serde

ValueFormat = Literal["text", "json", "bytes"]
VALUE_FORMATS: tuple[ValueFormat, ...] = ("text", "json", "bytes")
# When an aggregation emits: its latest value per key at each checkpoint, or an update per
# input record.
Emit = Literal["checkpoint", "record"]
# How the producers of a source placed its keyed records (`processor.api.keying`).
Partitioner = Literal["murmur2", "crc32"]
EMITS: tuple[Emit, ...] = ("checkpoint", "record")

# A source channel with no records for this long does not hold the watermark back.
DEFAULT_IDLE_MS = 10_000


@dataclass(eq=False, repr=False)
class Node:
    """One operator of the graph: ``name`` (what finds its state), ``parent`` (None for a
    source), ``keyed`` (its output carries a key) and ``children``. Identity is equality:
    nodes key the engine's maps."""

    kind: ClassVar[str]  # the kind's name, as users see it ("map", "count", "sink_postgres")

    name: str
    parent: Node | None
    keyed: bool
    children: list[Node] = field(default_factory=list, init=False)
    # Set by the planner (`processor.plan.stages`): records leaving this node carry their
    # event time (timed), a `processor.engine.meta.Meta` (meta); it takes them (meta_in).
    timed: bool = field(default=False, init=False)
    meta: bool = field(default=False, init=False)
    meta_in: bool = field(default=False, init=False)

    @property
    def inputs(self) -> list[Node]:
        """The nodes whose records enter this one: its parent (a union's other inputs too)."""
        return [] if self.parent is None else [self.parent]

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


@dataclass(eq=False, repr=False, kw_only=True)
class SourceNode(Node):
    """``source``: records of ``topic``, decoded by ``value_format`` (a built-in's name, or a
    serde) and ``key_format`` (the Kafka key's, for functions given ``meta=True``; None: not
    decoded). Event time: ``timestamp_fn`` (None: the Kafka record's timestamp), the
    out-of-orderness bound, and how long a partition without records may hold the
    watermark back (``idle_ms``)."""

    kind = "source"

    topic: str
    value_format: ValueFormat | Serde = "text"
    key_format: Any = None
    timestamp_fn: Callable[[Any], Any] | None = None
    out_of_orderness_ms: int = 0
    idle_ms: int = DEFAULT_IDLE_MS


@dataclass(eq=False, repr=False, kw_only=True)
class FunctionNode(Node):
    """A user function per value: ``fn(value)``, or ``fn(value, meta)`` given ``meta=True``
    (``uses_meta``). Its records are its input's, changed: they keep their metadata."""

    fn: Callable[..., Any]
    uses_meta: bool = False


@dataclass(eq=False, repr=False, kw_only=True)
class MapNode(FunctionNode):
    """``map``: ``fn(value)`` in place of each value."""

    kind = "map"


@dataclass(eq=False, repr=False, kw_only=True)
class FilterNode(FunctionNode):
    """``filter``: the values ``fn`` is true of."""

    kind = "filter"


@dataclass(eq=False, repr=False, kw_only=True)
class FlatMapNode(FunctionNode):
    """``flat_map``: ``fn(value)`` gives any number of values. ``batch_fn``: the same over a
    whole batch (a list of values -> a list of outputs), for functions much faster once per
    batch than once per value (word count's regex)."""

    kind = "flat_map"

    batch_fn: Callable[[list[Any]], Iterable[Any]] | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class KeyByNode(FunctionNode):
    """``key_by``: each value keyed by ``fn``, into the shuffle of the stage it heads
    (``topic``, if the pipeline names it: the built-in word count's ``<job>.shuffle``; else
    ``<job>.<stage>``); or, with ``feeds``, a loop's feedback: its records go round into
    that loop (`processor.api.loops`).

    ``prune``, the engine's, not the user's: given the values of one key that a task ships
    together, those that can matter downstream (`processor.api.windowing.top_results`' bound:
    of a window's results, only those a top-n may keep), in their order; None ships all.

    ``local``: no shuffle (``key_by_kafka_key``): the source's partitions are its keys'
    already, so the keyed operators run in the source's stage (`processor.api.keying`)."""

    kind = "key_by"

    topic: str = ""
    feeds: LoopNode | None = None
    prune: Callable[[list[Any]], list[Any]] | None = None
    local: Partitioner | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class WindowNode(Node):
    """``window``: the shape of the windows the per-key operator after it runs in. Tumbling
    (``size_ms``), hopping (``slide_ms`` too; 0: tumbling) or session (``gap_ms``, alone);
    ``lateness_ms`` keeps a window open after the watermark passes its end; ``bounds``:
    results as ``{key, start, end, value}``."""

    kind = "window"

    size_ms: int = 0
    slide_ms: int = 0
    gap_ms: int = 0
    lateness_ms: int = 0
    bounds: bool = False

    @property
    def session(self) -> bool:
        """Session windows: they merge, and so must their state."""
        return self.gap_ms > 0


@dataclass(eq=False, repr=False, kw_only=True)
class PerKeyNode(Node):
    """An operator with state per key (an aggregation or ``process``): per key, or per key
    and window after a `WindowNode`. ``ttl_ms``: a key not updated for that long is deleted
    (0: never; `processor.engine.expiry`), never on windows."""

    ttl_ms: int = 0

    @property
    def window(self) -> WindowNode | None:
        """The window it runs per, if any (its parent)."""
        parent = self.parent
        return parent if isinstance(parent, WindowNode) else None

    @property
    def windowed(self) -> bool:
        """Per window: its result is emitted once per window."""
        return isinstance(self.parent, WindowNode)


@dataclass(eq=False, repr=False, kw_only=True)
class AggregationNode(PerKeyNode):
    """count, sum, reduce or aggregate: a value per key (and window) folded from its
    values. ``emit`` (not on windows): its latest value per key at each checkpoint, or an
    update per input record."""

    emit: Emit = "checkpoint"

    @property
    def aggregated(self) -> bool:
        """Its output is a changelog of per-key values: one update per key and checkpoint,
        or per input record (`per_record`); not a window's, emitted once per window."""
        return not self.windowed

    @property
    def per_record(self) -> bool:
        """It emits an update per input record (``emit="record"``)."""
        return self.emit == "record"

    @property
    def mergeable(self) -> bool:
        """Two partial results of it merge into one: a combiner may pre-aggregate it."""
        return True


@dataclass(eq=False, repr=False, kw_only=True)
class CountNode(AggregationNode):
    """``count``: the number of values per key."""

    kind = "count"


@dataclass(eq=False, repr=False, kw_only=True)
class SumNode(AggregationNode):
    """``sum``: the sum of the values per key (numbers only)."""

    kind = "sum"


@dataclass(eq=False, repr=False, kw_only=True)
class ReduceNode(AggregationNode):
    """``reduce``: ``fn(accumulated, value)`` folded over the values, the first as is."""

    kind = "reduce"

    fn: Callable[[Any, Any], Any]


@dataclass(eq=False, repr=False, kw_only=True)
class AggregateNode(AggregationNode):
    """``aggregate``: ``fn(accumulator, value)`` folded from ``initial``; ``merge(a, b)``, if
    given, combines two accumulators (a combiner's partials, merging sessions)."""

    kind = "aggregate"

    fn: Callable[[Any, Any], Any]
    initial: Any = None
    merge: Callable[[Any, Any], Any] | None = None

    @property
    def mergeable(self) -> bool:
        return self.merge is not None


@dataclass(eq=False, repr=False, kw_only=True)
class ProcessNode(PerKeyNode):
    """``process``: ``fn(value, state)`` per record with a state handle per key.
    ``on_timer``: its timer callback (`processor.engine.timers`), in wall-clock time with
    ``processing_time``, else in event time. ``headers``: its records carry their Kafka
    headers (None: if ``fn`` reads them, `processor.plan.stages.reads_headers`)."""

    kind = "process"

    fn: Callable[..., Any]
    on_timer: Callable[..., Any] | None = None
    processing_time: bool = False
    headers: bool | None = None

    @property
    def event_timers(self) -> bool:
        """Its timers count in event time."""
        return self.on_timer is not None and not self.processing_time


@dataclass(eq=False, repr=False, kw_only=True)
class JoinNode(Node):
    """``join``: its parent (the left input) and ``other`` (the right one), two key_bys,
    paired per key within ``within_ms`` of event time (None: no time bound). It heads the
    stage that reads both shuffles."""

    kind = "join"

    other: KeyByNode
    within_ms: int | None = 0

    @property
    def sides(self) -> list[KeyByNode]:
        """Its inputs, left then right."""
        assert isinstance(self.parent, KeyByNode)
        return [self.parent, self.other]


@dataclass(eq=False, repr=False, kw_only=True)
class UnionNode(Node):
    """A node whose records are those of every input: its parent's and ``merged``'s."""

    merged: list[Node] = field(default_factory=list)

    @property
    def inputs(self) -> list[Node]:
        if self.parent is None:
            return []
        return [self.parent, *self.merged]


@dataclass(eq=False, repr=False, kw_only=True)
class MergeNode(UnionNode):
    """``merge``: the union of its parent and the other streams in ``merged``."""

    kind = "merge"


@dataclass(eq=False, repr=False, kw_only=True)
class LoopNode(UnionNode):
    """A loop (`processor.api.loops`): its input (the parent) and the body's feedback (in
    ``merged`` once the body is closed)."""

    kind = "loop"


@dataclass(eq=False, repr=False, kw_only=True)
class SinkNode(Node):
    """``sink``: records into ``topic``; ``sink_spec``: its key, value and headers, unless
    the defaults (None: the key as text, the value as JSON)."""

    kind = "sink"

    topic: str
    sink_spec: SinkSpec | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class PostgresSinkNode(Node):
    """``sink_postgres``: rows upserted into a PostgreSQL table (``postgres``: its server,
    table and columns; `processor.api.postgres`)."""

    kind = "sink_postgres"

    postgres: PostgresTarget


# The nodes a task keeps state for, per key (in snapshots, and queryable).
Stateful = PerKeyNode | JoinNode
