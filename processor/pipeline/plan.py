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
    head: Node  # the source or key_by node whose records enter the stage
    nodes: list[Node] = field(default_factory=list)  # operators after the head, graph order
    upstream: Stage | None = None

    @property
    def is_source(self) -> bool:
        return self.head.kind == "source"

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
        return [
            n for n in self.nodes if n.kind in ("count", "sum", "reduce", "aggregate", "process")
        ]

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
    stages: list[Stage] = []
    heads = [n for n in pipeline.nodes if n.kind in ("source", "key_by")]
    by_head: dict[Node, Stage] = {}
    for head in heads:  # creation order: a key_by's upstream stage always exists already
        stage = Stage(head.name, head)
        if head.parent is not None:
            stage.upstream = by_head[_stage_head(head.parent)]
        by_head[head] = stage
        stages.append(stage)
    for node in pipeline.nodes:
        if node.kind == "source":
            continue
        assert node.parent is not None
        by_head[_stage_head(node.parent)].nodes.append(node)
    return Plan(stages)


def _stage_head(node: Node) -> Node:
    """The source or key_by whose stage runs ``node``'s output."""
    while node.kind not in ("source", "key_by"):
        assert node.parent is not None
        node = node.parent
    return node
