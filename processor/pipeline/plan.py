"""A pipeline's graph, split into stages: what the engine runs.

A stage begins at a source (one task per input partition) or at a ``key_by`` (one task per
partition of its shuffle topic ``<job>.<stage name>``) and holds every operator up to the
next ``key_by`` or sink, chained in one task with no topic between them. A stage writes to
sinks and to the shuffle topics of the stages downstream of it; its transaction holds those
writes with its input positions, as for word count today.

A stage downstream of a ``key_by`` whose only consumer is an aggregation that can merge
partial results (count, sum, reduce, or aggregate with ``merge``) is *combinable*: the
upstream stage pre-aggregates each epoch per key and ships partial results, as word count's
combiner does. That is exact because an epoch's partial results commit atomically with the
input positions they cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.pipeline.api import Node, Pipeline, PipelineError

# Kafka's limit on a topic name's length.
MAX_TOPIC_CHARS = 249


@dataclass(eq=False)
class Stage:
    name: str
    head: Node  # the source, key_by or join node whose records enter the stage
    nodes: list[Node] = field(default_factory=list)  # operators after the head, graph order
    # The key_by nodes writing into this stage's shuffle (one, two for a join; none for a
    # source stage) and the stages that run them, in channel order.
    inputs: list[Node] = field(default_factory=list)
    upstreams: list[Stage] = field(default_factory=list)

    @property
    def is_source(self) -> bool:
        return self.head.kind == "source"

    @property
    def upstream(self) -> Stage | None:
        """The stage upstream (the left one of a join)."""
        return self.upstreams[0] if self.upstreams else None

    @property
    def is_join(self) -> bool:
        return self.head.kind == "join"

    @property
    def timed(self) -> bool:
        return self.head.timed

    @property
    def sinks(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "sink"]

    @property
    def shuffles(self) -> list[Node]:
        """The key_by nodes this stage writes to: each one the head of a stage downstream."""
        return [n for n in self.nodes if n.kind == "key_by"]

    @property
    def combiner(self) -> Node | None:
        """The aggregation whose partial results upstream may pre-aggregate, if any."""
        if self.head.kind != "key_by" or len(self.head.children) != 1:
            return None
        first = self.head.children[0]
        if first.kind in ("count", "sum", "reduce"):
            return first
        if first.kind == "aggregate" and first.fn2 is not None:
            return first
        return None

    @property
    def stateful(self) -> list[Node]:
        kinds = ("count", "sum", "reduce", "aggregate", "process")
        return [n for n in [self.head, *self.nodes] if n.kind in kinds or n.kind == "join"]

    def shuffle_topic(self, job: str) -> str:
        """The internal topic feeding this stage (only for a stage headed by key_by)."""
        return f"{job}.{self.name}"


@dataclass(frozen=True)
class Plan:
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def target(self, key_by: Node | str) -> Stage:
        """The stage a key_by node writes into."""
        name = key_by if isinstance(key_by, str) else key_by.name
        for stage in self.stages:
            if any(n.name == name for n in stage.inputs):
                return stage
        raise KeyError(name)

    @property
    def timed(self) -> bool:
        return any(s.timed for s in self.stages)

    @property
    def sink_topics(self) -> list[str]:
        return sorted({n.topic for s in self.stages for n in s.sinks})

    @property
    def source_topics(self) -> list[str]:
        return sorted({s.head.topic for s in self.stages if s.is_source})

    def check_topic_names(self, job: str) -> None:
        for stage in self.stages:
            if not stage.is_source and len(stage.shuffle_topic(job)) > MAX_TOPIC_CHARS:
                raise PipelineError(
                    f"the shuffle topic of stage {stage.name!r} would be longer than "
                    f"{MAX_TOPIC_CHARS} characters: name the key_by (name=...) or the job shorter"
                )


def plan(pipeline: Pipeline) -> Plan:
    """Split ``pipeline`` into stages; PipelineError (one line) if it cannot run."""
    if not isinstance(pipeline, Pipeline):
        raise PipelineError(f"expected a processor.Pipeline, got {type(pipeline).__name__}")
    if not pipeline.sources:
        raise PipelineError("the pipeline has no source")
    if not pipeline.sinks:
        raise PipelineError("the pipeline has no sink: nothing would ever be written")
    _check_time(pipeline)
    stages: list[Stage] = []
    heads = [n for n in pipeline.nodes if _is_head(n)]
    by_head: dict[Node, Stage] = {}
    for head in heads:  # creation order: a head's upstream stages always exist already
        stage = Stage(head.name, head)
        if head.kind == "join":
            assert head.parent is not None and head.other is not None
            stage.inputs = [head.parent, head.other]
        elif head.kind == "key_by":
            stage.inputs = [head]
        for key_by in stage.inputs:
            assert key_by.parent is not None
            stage.upstreams.append(by_head[_stage_head(key_by.parent)])
        by_head[head] = stage
        stages.append(stage)
    for node in pipeline.nodes:
        if _is_head(node) and node.kind != "key_by":
            continue
        assert node.parent is not None
        by_head[_stage_head(node.parent)].nodes.append(node)
    return Plan(stages)


def _is_head(node: Node) -> bool:
    """A source, a join, or a key_by that does not feed a join (that one is the join's)."""
    if node.kind == "key_by":
        return not any(c.kind == "join" for c in node.children)
    return node.kind in ("source", "join")


def _stage_head(node: Node) -> Node:
    """The source, key_by or join whose stage runs ``node``'s output."""
    while not _is_head(node):
        assert node.parent is not None
        node = node.parent
    return node


# Nodes whose output keeps the event time of their input; windows and joins make their own.
_KEEPS_TIME = frozenset({"source", "map", "filter", "flat_map", "key_by", "window"})


def _check_time(pipeline: Pipeline) -> None:
    """Mark the nodes whose records carry event time; refuse windows and joins without it.

    A pipeline with a window, a join or a ``process`` with event-time timers is timed from
    every source on (watermarks need every channel). A ``process`` keeps the time (a timer's
    output has the timer's); other aggregations than windowed ones, and sinks, drop it.
    """
    for node in pipeline.nodes:
        node.timed = False
        if node.kind == "join":
            for side in (node.parent, node.other):
                assert side is not None
                if len(side.children) != 1:
                    raise PipelineError(
                        f"join {node.name!r}: its input {side.name!r} has other uses; "
                        "key_by again for another branch"
                    )
        if node.kind == "window" and not node.children:
            raise PipelineError(f"window {node.name!r}: follow it with an aggregation")
    if not any(n.kind in ("window", "join") or _event_timers(n) for n in pipeline.nodes):
        return
    for node in pipeline.nodes:  # creation order: parents first
        parent = node.parent
        if node.kind == "source":
            node.timed = True
        elif node.kind == "join" or node.windowed:
            if parent is None or not parent.timed:
                raise PipelineError(
                    f"{node.name!r}: windows and joins need event time, which "
                    f"{parent.name if parent else 'its input'!r} does not carry (an "
                    "aggregation or process before it drops it)"
                )
            if node.kind == "join" and (node.other is None or not node.other.timed):
                raise PipelineError(f"join {node.name!r}: its right input has no event time")
            node.timed = True
        elif node.kind in _KEEPS_TIME and parent is not None:
            node.timed = parent.timed
        elif node.kind == "process" and parent is not None:
            if _event_timers(node) and not parent.timed:
                raise PipelineError(
                    f"process {node.name!r}: event-time timers need event time, which "
                    f"{parent.name!r} does not carry (an aggregation before it drops it)"
                )
            node.timed = parent.timed


def _event_timers(node: Node) -> bool:
    """A ``process`` whose timers count in event time."""
    return node.kind == "process" and node.on_timer is not None and not node.processing_time
