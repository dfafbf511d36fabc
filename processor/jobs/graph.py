"""A job as the engine runs it: a pipeline's stages, their tasks and their topics.

Every stage runs as tasks ``<stage>-<index>``: a source stage one per partition of its
source topic, a keyed stage one per partition of its shuffle topic. A keyed stage's input
*channels* are the tasks of the stage upstream of it: each writes its own barriers and
records into every shuffle partition, and the keyed task aligns on all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from processor.api.node import KeyByNode, SourceNode
from processor.plan.stages import Plan, Stage
from processor.topics import LATE, feedback_topic, job_topic, shuffle_topic


@dataclass(frozen=True)
class TaskId:
    stage: str
    index: int

    def __str__(self) -> str:
        return f"{self.stage}-{self.index}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        stage, _, index = text.rpartition("-")
        return cls(stage, int(index))


@dataclass(frozen=True)
class JobGraph:
    job_name: str
    plan: Plan

    @property
    def stages(self) -> list[Stage]:
        return self.plan.stages

    def stage(self, name: str) -> Stage:
        return self.plan.stage(name)

    def shuffle_topic(self, stage: Stage | str) -> str:
        """The internal topic feeding a keyed stage: ``<job>.<stage>`` unless the pipeline
        named it (the built-in word count keeps ``<job>.shuffle``). By name: a stage's, or a
        key_by's that writes into it."""
        if isinstance(stage, str):
            names = {s.name for s in self.plan.stages}
            stage = self.plan.stage(stage) if stage in names else self.plan.target(stage)
        head = stage.head
        named = head.topic if isinstance(head, SourceNode | KeyByNode) else ""
        return named or shuffle_topic(self.job_name, stage.name)

    @property
    def late_topic(self) -> str:
        """Where windows and joins write the records that came after their watermark."""
        return job_topic(self.job_name, LATE)

    def feedback_topic(self, stage: Stage) -> str:
        """The topic a loop stage's records go round through (`processor.api.loops`)."""
        assert stage.loop is not None, f"stage {stage.name!r} runs no loop"
        return feedback_topic(self.job_name, stage.loop.name)

    @property
    def shuffle_topics(self) -> list[str]:
        """The shuffles of the keyed stages, and the feedback topics of their loops: topics
        the job's tasks write, read and purge."""
        topics = [self.shuffle_topic(s) for s in self.stages if not s.is_source]
        return topics + [self.feedback_topic(s) for s in self.plan.loops]

    def downstream(self, stage: Stage) -> list[Stage]:
        return [s for s in self.stages if stage in s.upstreams]

    def parallelism(
        self, source_partitions: Mapping[str, int], shuffle_partitions: int
    ) -> dict[str, int]:
        """Tasks per stage, from the source topics' partition counts."""
        return {
            s.name: shuffle_partitions if s.source is None else source_partitions[s.source.topic]
            for s in self.stages
        }

    def task_ids(self, parallelism: Mapping[str, int]) -> list[str]:
        return [str(TaskId(s.name, i)) for s in self.stages for i in range(parallelism[s.name])]

    def channels(self, stage: Stage, parallelism: Mapping[str, int]) -> int:
        """Input channels of a keyed stage's task: the tasks of the stages upstream (both
        inputs' of a join)."""
        assert stage.upstreams, "a source stage has no channels"
        return sum(parallelism[u.name] for u in stage.upstreams)

    def channel_layout(self, stage: Stage, parallelism: Mapping[str, int]) -> list[list[Any]]:
        """``[[upstream stage, its tasks], ...]`` in channel order: what a keyed task's
        channel numbers mean (a join's right input comes after its left input's tasks)."""
        return [[u.name, parallelism[u.name]] for u in stage.upstreams]

    def channel_base(
        self, key_by: str, parallelism: Mapping[str, int], upstream: str | None = None
    ) -> int:
        """The channel of task 0 of ``upstream`` (by default the first stage running
        ``key_by``), in the stage ``key_by`` writes to: a join's right input comes after its
        left input's channels, and a key_by below a merge of several stages' streams has
        channels for each of them."""
        target = self.plan.target(key_by)
        base = 0
        for node, stage in zip(target.inputs, target.upstreams, strict=True):
            if node.name == key_by and upstream in (None, stage.name):
                return base
            base += parallelism[stage.name]
        raise KeyError(key_by)

    def side_of(self, stage: Stage, channel: int, parallelism: Mapping[str, int]) -> int:
        """Which input of ``stage`` (0, or 1 for a join's right) ``channel`` belongs to."""
        for side, upstream in enumerate(stage.upstreams):
            channel -= parallelism[upstream.name]
            if channel < 0:
                return side
        raise ValueError(f"channel beyond the stage's {len(stage.upstreams)} inputs")
