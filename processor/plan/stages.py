"""A pipeline's graph, split into stages: what the engine runs.

A stage begins at a source (one task per input partition) or at a ``key_by`` (one task per
partition of its shuffle topic ``<job>.<stage name>``) and holds every operator up to the
next ``key_by`` or sink, chained in one task with no topic between them. A stage writes to
sinks and to the shuffle topics of the stages downstream of it; its transaction holds those
writes with its input positions, as for word count today.

A stage downstream of a ``key_by`` whose only consumer is an aggregation that can merge
partial results (count, sum, reduce, or aggregate with ``merge``; and emits per checkpoint,
not per record) is *combinable*: the
upstream stage pre-aggregates each epoch per key and ships partial results, as word count's
combiner does. That is exact because an epoch's partial results commit atomically with the
input positions they cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.api.node import (
    AggregationNode,
    FilterNode,
    FlatMapNode,
    FunctionNode,
    JoinNode,
    KeyByNode,
    LoopNode,
    MapNode,
    MergeNode,
    PerKeyNode,
    PostgresSinkNode,
    ProcessNode,
    SinkNode,
    SourceNode,
    Stateful,
    UnionNode,
    WindowNode,
)
from processor.api.streams import Node, Pipeline, PipelineError
from processor.topics import INTERNAL_SUFFIXES, feedback_topic, job_topic, shuffle_topic

# Kafka's limit on a topic name's length.
MAX_TOPIC_CHARS = 249


@dataclass(eq=False)
class Stage:
    name: str
    head: Node  # the source, key_by or join node whose records enter the stage
    nodes: list[Node] = field(default_factory=list)  # operators after the head, graph order
    # The key_by nodes writing into this stage's shuffle (one, two for a join; none for a
    # source stage) and the stages that run them, in channel order.
    inputs: list[KeyByNode] = field(default_factory=list)
    upstreams: list[Stage] = field(default_factory=list)

    @property
    def source(self) -> SourceNode | None:
        """The source node heading a source stage (None: a keyed stage)."""
        head = self.head
        return head if isinstance(head, SourceNode) else None

    @property
    def is_source(self) -> bool:
        return isinstance(self.head, SourceNode)

    @property
    def upstream(self) -> Stage | None:
        """The stage upstream (the left one of a join)."""
        return self.upstreams[0] if self.upstreams else None

    @property
    def is_join(self) -> bool:
        return isinstance(self.head, JoinNode)

    @property
    def timed(self) -> bool:
        return self.head.timed

    @property
    def sinks(self) -> list[SinkNode]:
        return [n for n in self.nodes if isinstance(n, SinkNode)]

    @property
    def postgres_sinks(self) -> list[PostgresSinkNode]:
        """Its sinks into PostgreSQL tables (`processor.sinks.postgres.writer`)."""
        return [n for n in self.nodes if isinstance(n, PostgresSinkNode)]

    @property
    def pair_widths(self) -> tuple[int, ...]:
        """Items of an uncombined shuffle record into this stage: [key, value], with the
        event time in a timed stage, and the headers too in a stage that takes metadata
        (which also takes them without: records an older version wrote before an upgrade)."""
        width = 3 if self.head.timed else 2
        return (width, 4) if self.head.meta else (width,)

    @property
    def shuffles(self) -> list[KeyByNode]:
        """The key_by nodes this stage writes to: each one the head of a stage downstream
        (a loop's feedback key_by aside: `feedback`)."""
        return [n for n in self.outputs if n.feeds is None]

    @property
    def outputs(self) -> list[KeyByNode]:
        """Every key_by the stage writes through: its shuffles, and its loop's feedback."""
        return [n for n in self.nodes if isinstance(n, KeyByNode) and n.local is None]

    @property
    def keyed_source(self) -> KeyByNode | None:
        """Of a source stage read as keyed (`processor.api.keying`): its local key_by, after
        which the stage's operators keep state per key with no shuffle."""
        return next((n for n in self.nodes if isinstance(n, KeyByNode) and n.local), None)

    @property
    def loop(self) -> LoopNode | None:
        """The loop node of this stage, if the stage runs a loop (`processor.api.loops`)."""
        return next((n for n in self.nodes if isinstance(n, LoopNode)), None)

    @property
    def feedback(self) -> KeyByNode | None:
        """The key_by whose records go round this stage's loop, if it has one."""
        return next((n for n in self.outputs if n.feeds is not None), None)

    @property
    def combiner(self) -> AggregationNode | None:
        """The aggregation whose partial results upstream may pre-aggregate, if any. Not one
        that emits per record: pre-aggregation would merge the updates it must emit."""
        if not isinstance(self.head, KeyByNode) or len(self.head.children) != 1:
            return None
        first = self.head.children[0]
        if not isinstance(first, AggregationNode) or first.per_record:
            return None
        if first.ttl_ms and self.head.timed:  # its TTL counts from each record's event time
            return None
        return first if first.mergeable else None

    @property
    def stateful(self) -> list[Stateful]:
        """Its nodes with state per key: aggregations, processes, a join."""
        return [n for n in [self.head, *self.nodes] if isinstance(n, PerKeyNode | JoinNode)]

    def shuffle_topic(self, job: str) -> str:
        """The internal topic feeding this stage (only for a stage headed by key_by)."""
        return shuffle_topic(job, self.name)


@dataclass(frozen=True)
class Plan:
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def target(self, key_by: Node | str) -> Stage:
        """The stage a key_by node writes into (a feedback key_by: its loop's)."""
        name = key_by if isinstance(key_by, str) else key_by.name
        for stage in self.stages:
            if any(n.name == name for n in stage.inputs):
                return stage
            feedback = stage.feedback
            if feedback is not None and feedback.name == name:
                return stage
        raise KeyError(name)

    @property
    def loops(self) -> list[Stage]:
        """The stages that run a loop."""
        return [s for s in self.stages if s.loop is not None]

    @property
    def timed(self) -> bool:
        return any(s.timed for s in self.stages)

    @property
    def sink_topics(self) -> list[str]:
        return sorted({n.topic for s in self.stages for n in s.sinks})

    @property
    def source_topics(self) -> list[str]:
        return sorted({s.source.topic for s in self.stages if s.source is not None})

    def check_topic_names(self, job: str) -> None:
        """PipelineError if a topic name of the job is too long, or if a shuffle, source or
        sink topic is one of the job's internal topics (or another stage's shuffle)."""
        internal = {job_topic(job, suffix): suffix for suffix in INTERNAL_SUFFIXES}
        shuffles: dict[str, str] = {}  # shuffle topic -> its stage
        for stage in self.stages:
            if stage.is_source:
                continue
            topic = stage.shuffle_topic(job)
            if len(topic) > MAX_TOPIC_CHARS:
                raise PipelineError(
                    f"the shuffle topic of stage {stage.name!r} would be longer than "
                    f"{MAX_TOPIC_CHARS} characters: name the key_by (name=...) or the job shorter"
                )
            if topic in internal:
                raise PipelineError(
                    f"stage {stage.name!r} would shuffle through {topic}, job {job}'s "
                    f"{internal[topic]} topic: name its key_by otherwise (name=...)"
                )
            shuffles[topic] = stage.name
            loop = stage.loop
            if loop is not None:
                topic = feedback_topic(job, loop.name)
                if len(topic) > MAX_TOPIC_CHARS:
                    raise PipelineError(
                        f"the feedback topic of loop {loop.name!r} would be longer than "
                        f"{MAX_TOPIC_CHARS} characters: name the loop (name=...) or the job shorter"
                    )
                shuffles[topic] = stage.name
        for role, topics in (("source", self.source_topics), ("sink", self.sink_topics)):
            for topic in topics:
                owner = (
                    f"{internal[topic]} topic"
                    if topic in internal
                    else f"shuffle topic of stage {shuffles[topic]!r}"
                    if topic in shuffles
                    else ""
                )
                if owner:
                    raise PipelineError(
                        f"{role}({topic!r}) is job {job}'s own {owner}: use another topic, "
                        "or another job name (PROCESSOR_JOB_NAME)"
                    )


def plan(pipeline: Pipeline) -> Plan:
    """Split ``pipeline`` into stages; PipelineError (one line) if it cannot run."""
    if not isinstance(pipeline, Pipeline):
        raise PipelineError(f"expected a processor.Pipeline, got {type(pipeline).__name__}")
    if not pipeline.sources:
        raise PipelineError("the pipeline has no source")
    if not pipeline.sinks and not any(isinstance(n, PostgresSinkNode) for n in pipeline.nodes):
        raise PipelineError("the pipeline has no sink: nothing would ever be written")
    _check_time(pipeline)
    _check_merges(pipeline)
    _check_meta(pipeline)
    stages: list[Stage] = []
    heads = [n for n in pipeline.nodes if _is_head(n)]
    by_head: dict[Node, Stage] = {}
    for head in heads:  # creation order: a head's upstream stages always exist already
        stage = Stage(head.name, head)
        key_bys = _shuffled(head)
        # One input per (key_by, upstream stage): a key_by after a merge of streams of
        # several stages is written by each of them.
        for key_by in key_bys:
            for upstream in _stage_heads(key_by.inputs):
                stage.inputs.append(key_by)
                stage.upstreams.append(by_head[upstream])
        by_head[head] = stage
        stages.append(stage)
    for node in pipeline.nodes:
        if _is_head(node) and not isinstance(node, KeyByNode):
            continue
        for head in _stage_heads(node.inputs):  # every stage whose records reach it
            by_head[head].nodes.append(node)
    for stage in stages:
        if stage.loop is not None:
            _check_loop(stage)
        if stage.keyed_source is not None:
            _check_keyed_source(stage)
    return Plan(stages)


def _check_keyed_source(stage: Stage) -> None:
    """What a keyed source's stage cannot have yet, one line each: a join, merge or loop
    in it, or reading its local key_by (each needs a shuffle to meet in)."""
    local = stage.keyed_source
    assert local is not None
    for node in [*stage.nodes, *local.children]:
        if isinstance(node, JoinNode | UnionNode):
            raise PipelineError(
                f"{node.kind} {node.name!r} after keyed_source({stage.head.name!r}): a "
                "join, merge or loop needs a key_by first (a keyed source's stage has none)"
            )


def _check_loop(stage: Stage) -> None:
    """What a loop's stage cannot have (docs/loops.md, rule 7), one line each."""
    loop = stage.loop
    assert loop is not None
    where = f"iterate {loop.name!r}"
    if sum(1 for n in stage.nodes if isinstance(n, LoopNode)) > 1:
        raise PipelineError(f"{where}: one loop per stage (key_by between two loops)")
    if stage.timed:
        raise PipelineError(
            f"{where}: event time (windows, joins, event-time timers in the pipeline) cannot "
            "go round a loop: its stage must not carry it"
        )
    if any(n.meta or n.meta_in for n in [stage.head, *stage.nodes]):
        raise PipelineError(
            f"{where}: record metadata (meta=True, state.headers) in a loop's stage is not "
            "supported"
        )
    feedback = stage.feedback
    if feedback is None or feedback.feeds is not loop:
        raise PipelineError(f"{where}: its feedback key_by must be in the loop's stage")


def _is_head(node: Node) -> bool:
    """A source, a join, a merge of keyed streams right after their key_bys, or a key_by
    that does not feed one of those two (that one is theirs)."""
    if isinstance(node, KeyByNode):
        if node.feeds is not None or node.local:  # a loop's feedback; a keyed source's
            return False
        return not any(isinstance(c, JoinNode) or _merges_shuffles(c) for c in node.children)
    if isinstance(node, MergeNode):
        return _merges_shuffles(node)
    return isinstance(node, SourceNode | JoinNode)


def _merges_shuffles(node: Node) -> bool:
    """A merge of keyed streams straight from their key_bys: a stage reading one shuffle."""
    return (
        isinstance(node, MergeNode)
        and node.keyed
        and all(isinstance(n, KeyByNode) for n in node.inputs)
    )


def _shuffled(head: Node) -> list[KeyByNode]:
    """The key_bys whose shuffle a stage headed by ``head`` reads (none: a source's)."""
    if isinstance(head, JoinNode):
        return head.sides
    if isinstance(head, KeyByNode):
        return [head]
    return [n for n in head.inputs if isinstance(n, KeyByNode)]  # a merge of shuffles


def _stage_heads(nodes: list[Node]) -> list[Node]:
    """The heads of the stages that run the outputs of ``nodes``, in order, each once (more
    than one below a merge of unkeyed streams of several stages)."""
    heads: list[Node] = []
    seen: set[int] = set()
    stack = list(reversed(nodes))
    while stack:  # depth first, inputs in order; not recursive: a chain may be long
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if _is_head(node):
            heads.append(node)
        else:
            stack.extend(reversed(node.inputs))
    return heads


def _check_merges(pipeline: Pipeline) -> None:
    """A merge of keyed streams must fall in one stage, or read their shuffles (a keyed
    stream's state lives in one stage's tasks); its key_bys feed nothing else."""
    for node in pipeline.nodes:
        if not isinstance(node, MergeNode) or not node.keyed:
            continue
        if _merges_shuffles(node):
            for key_by in node.inputs:
                if len(key_by.children) != 1:
                    raise PipelineError(
                        f"merge {node.name!r}: its input {key_by.name!r} has other uses; "
                        "key_by again for another branch"
                    )
        elif len(_stage_heads(node.inputs)) > 1:
            raise PipelineError(
                f"merge {node.name!r}: keyed streams of different stages merge right after "
                "their key_by: a.key_by(f).merge(b.key_by(g))"
            )


# Nodes whose output keeps the event time of their input; windows and joins make their own.
_KEEPS_TIME = (FunctionNode, WindowNode, MergeNode)


def _check_time(pipeline: Pipeline) -> None:
    """Mark the nodes whose records carry event time; refuse windows and joins without it.

    A pipeline with a window, a join or a ``process`` with event-time timers is timed from
    every source on (watermarks need every channel); so is one with a state TTL (``ttl_ms=``
    of an operator) and a source with a timestamp function, whose TTLs then count in event
    time (`processor.engine.ttl`). A ``process`` keeps the time (a timer's
    output has the timer's); other aggregations than windowed ones, and sinks, drop it.
    """
    for node in pipeline.nodes:
        node.timed = False
        if isinstance(node, JoinNode):
            for side in node.sides:
                if len(side.children) != 1:
                    raise PipelineError(
                        f"join {node.name!r}: its input {side.name!r} has other uses; "
                        "key_by again for another branch"
                    )
        if isinstance(node, WindowNode) and not node.children:
            raise PipelineError(f"window {node.name!r}: follow it with an aggregation")
    events = any(isinstance(n, WindowNode | JoinNode) or _event_timers(n) for n in pipeline.nodes)
    if not events and not _event_ttl(pipeline):
        return
    for node in pipeline.nodes:  # creation order: parents first
        node.timed = _timed(node)


def _timed(node: Node) -> bool:
    """Whether ``node``'s records carry event time in a timed pipeline (its inputs marked)."""
    parent = node.parent
    if isinstance(node, SourceNode):
        return True
    if isinstance(node, JoinNode) or (isinstance(node, PerKeyNode) and node.windowed):
        if parent is None or not parent.timed:
            raise PipelineError(
                f"{node.name!r}: windows and joins need event time, which "
                f"{parent.name if parent else 'its input'!r} does not carry (an "
                "aggregation or process before it drops it)"
            )
        if isinstance(node, JoinNode) and not node.other.timed:
            raise PipelineError(f"join {node.name!r}: its right input has no event time")
        return True
    if isinstance(node, MergeNode):
        times = {n.timed for n in node.inputs}
        if len(times) > 1:
            raise PipelineError(
                f"merge {node.name!r}: some inputs carry event time and some do not (an "
                "aggregation drops it): merge streams of the same kind"
            )
        return times.pop()
    if parent is None:
        return False
    if isinstance(node, ProcessNode):
        if node.event_timers and not parent.timed:
            raise PipelineError(
                f"process {node.name!r}: event-time timers need event time, which "
                f"{parent.name!r} does not carry (an aggregation before it drops it)"
            )
        return parent.timed
    return isinstance(node, _KEEPS_TIME) and parent.timed


# Nodes that pass their input's records on (a record's metadata rides along with its value).
_KEEPS_META = (MapNode, FilterNode, FlatMapNode)


def _check_meta(pipeline: Pipeline) -> None:
    """Mark the nodes whose records carry a `processor.engine.meta.Meta` (``meta``) and
    those that take them (``meta_in``), from the nodes that use it back to the sources: only
    those pay for it. A node uses it when given ``meta=True``, a ``process`` given
    ``headers=True`` does, and so does one left without whose code reads ``state.headers``
    (`reads_headers`). A source with ``key=``
    carries it (its keys are decoded). Records that aggregations, ``process``, windows and
    joins make carry none: a node after one that uses metadata gets the key (and event time)
    alone.

    A key_by ships metadata through its shuffle only if the stage after it takes it, so a
    ``key_by(..., meta=True)`` before a ``count`` still combines.
    """
    for node in reversed(pipeline.nodes):  # children before their parents
        takes = any(c.meta_in for c in node.children)
        uses = _uses_meta(node)
        if isinstance(node, _KEEPS_META):
            node.meta = node.meta_in = uses or takes
        elif isinstance(node, KeyByNode):
            node.meta = takes
            node.meta_in = uses or takes
        elif isinstance(node, SourceNode):
            node.meta = takes or node.key_format is not None
            node.meta_in = False
        elif isinstance(node, MergeNode):  # its inputs' records, converted (`into_merge`)
            node.meta = node.meta_in = takes
        else:
            node.meta = False
            node.meta_in = uses


def _uses_meta(node: Node) -> bool:
    """Whether ``node``'s own function takes a record's metadata."""
    if isinstance(node, FunctionNode):
        return node.uses_meta
    if isinstance(node, ProcessNode) and not node.windowed:
        return reads_headers(node) if node.headers is None else node.headers
    return False


def _event_timers(node: Node) -> bool:
    """A ``process`` whose timers count in event time."""
    return isinstance(node, ProcessNode) and node.event_timers


def _event_ttl(pipeline: Pipeline) -> bool:
    """An operator with ``ttl_ms=`` in a pipeline whose source has event time of its own."""
    return any(isinstance(n, PerKeyNode) and n.ttl_ms for n in pipeline.nodes) and any(
        n.timestamp_fn is not None for n in pipeline.sources
    )


def reads_headers(node: ProcessNode) -> bool:
    """Whether a non-windowed ``process``'s function reads ``state.headers``: then its
    records carry their metadata (`processor.engine.metachain`), which costs every record
    on the way from the source; otherwise they come as any keyed records do. Read from the
    function's code (a callable without code is taken to read them)."""
    code = getattr(node.fn, "__code__", None)
    return code is None or "headers" in code.co_names
