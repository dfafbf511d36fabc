"""The tasks of `processor.testing.Driver` (internal to it): one per stage and partition, each
a `StageChain` over an in-memory state (`MemoryState`), and how a task reads its input as the
engine's tasks do: a source task its sent records in the engine's batches (`read_sources`), a
keyed task its shuffle partition, records and watermarks in order (`read_shuffle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.engine.chain import StageChain
from processor.engine.meta import Meta
from processor.engine.time import ChannelWatermarks, SourceWatermarks, source_marks
from processor.jobs.graph import JobGraph
from processor.models.records import Watermark, decode_shuffle
from processor.plan.stages import Plan, Stage

# Source records decoded per `StageChain.values` call at most: the engine's batches.
_BATCH = 500


@dataclass(frozen=True)
class SentRecord:
    """A record as `processor.testing.Driver.send` got it, value decoded (the pipeline's
    input)."""

    value: Any
    key: Any = None
    timestamp: int = 0
    headers: list[tuple[str, bytes]] | None = None
    partition: int = 0
    offset: int = 0


class MemoryState:
    """A task's state: the two-method backend `StageChain` takes, in a dict (``data``).

    >>> state = MemoryState(); state.write({b"k": b"1"}); state.get_many([b"k", b"x"])
    [b'1', None]
    """

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.data.get(k) for k in keys]

    def write(self, items: Mapping[bytes, bytes | None]) -> None:
        for key, value in items.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value


# What a keyed task reads from its shuffle partition, in order: records (channel, value),
# and the watermarks of its channels.
Message = bytes | Watermark


@dataclass(eq=False)
class Task:
    stage: Stage
    index: int
    chain: StageChain
    # Per downstream shuffle: (key_by name, target stage, this task's channel in it).
    outputs: list[tuple[str, Stage, int]]
    sent_mark: tuple[int, bool] | None = None  # the last watermark forwarded
    # Source tasks: records not yet given to the chain, and the watermark (of a keyed
    # source, the last one it advanced its chain by).
    pending: list[SentRecord] = field(default_factory=list)
    source_marks: SourceWatermarks | None = None
    source_mark: tuple[int, bool] | None = None
    # Keyed tasks: the shuffle partition's unread records, the channels' watermarks, and of
    # a join which input each channel is.
    inbox: list[Message] = field(default_factory=list)
    channel_marks: ChannelWatermarks | None = None
    sides: list[int] = field(default_factory=list)
    # A loop's task: fed-back records to process at this checkpoint, and those written since
    # (processed at the next one: the engine's are visible once their transaction commits).
    fed_back: list[bytes] = field(default_factory=list)
    fed_back_next: list[bytes] = field(default_factory=list)


def new_task(
    plan: Plan,
    graph: JobGraph,
    parallelism: Mapping[str, int],
    stage: Stage,
    index: int,
    late_topic: str,
) -> Task:
    """Task ``index`` of ``stage``, with ``parallelism`` tasks per stage (by name)."""
    shuffles = {n.name: parallelism[plan.target(n).name] for n in stage.outputs}
    chain = StageChain(plan, stage, index, MemoryState(), shuffles, late_topic=late_topic)
    outputs = [
        (
            n.name,
            plan.target(n),
            graph.channel_base(n.name, parallelism, stage.name) + index,
        )
        for n in stage.shuffles
    ]
    task = Task(stage, index, chain, outputs)
    head = stage.source
    if head is not None:
        task.source_marks = SourceWatermarks([0], head.out_of_orderness_ms, head.idle_ms)
        if stage.keyed_source is not None:  # its chain's watermark, as a keyed task's
            task.channel_marks = ChannelWatermarks(1)
    else:
        channels = graph.channels(stage, parallelism)
        task.channel_marks = ChannelWatermarks(channels)
        if stage.is_join:
            task.sides = [graph.side_of(stage, c, parallelism) for c in range(channels)]
    return task


def read_sources(task: Task) -> None:
    """A source task's pending records through its chain, in batches, its watermark on."""
    head, marks = task.stage.source, task.source_marks
    assert head is not None and marks is not None
    kafka_times = head.timed and head.timestamp_fn is None
    pending, task.pending = task.pending, []
    for start in range(0, len(pending), _BATCH):
        batch = pending[start : start + _BATCH]
        times = [r.timestamp for r in batch] if kafka_times else None
        metas = None
        if head.meta:  # as the source task reads them (`processor.worker.source_meta`)
            metas = [
                Meta(r.key, r.timestamp, list(r.headers or []), head.topic, r.partition, r.offset)
                for r in batch
            ]
        newest = task.chain.values([r.value for r in batch], times=times, metas=metas)
        if newest is not None:
            marks.observe(0, newest)


def advance_keyed_source(task: Task, floor: int) -> None:
    """A keyed source task's watermark into its chain, at a checkpoint before the flush, as
    `processor.worker.keyed_source` does (``floor``: the driver's forced watermark)."""
    marks, channel = task.source_marks, task.channel_marks
    assert marks is not None and channel is not None
    for mark in source_marks(marks, task.source_mark, floor):
        task.source_mark = mark
        risen = channel.on_mark(0, mark[0], mark[1])
        if risen is not None:
            task.chain.advance(risen)


def read_shuffle(task: Task) -> None:
    """A keyed task's unread shuffle records and watermarks through its chain, in order."""
    chain, marks = task.chain, task.channel_marks
    assert marks is not None
    inbox, task.inbox = task.inbox, []
    for message in inbox:
        if isinstance(message, Watermark):
            risen = marks.on_mark(message.channel, message.time_ms, message.idle)
            if risen is not None:
                chain.advance(risen)
            continue
        channel, body = decode_shuffle(message)
        chain.shuffled(body, side=task.sides[channel] if task.sides else 0)


def read_fed_back(task: Task) -> None:
    """A loop task's fed-back records of the last checkpoint, after its input's, in order:
    what a keyed task does at a barrier (`processor.worker.keyed_feedback`)."""
    records, task.fed_back = task.fed_back, []
    for record in records:
        _, body = decode_shuffle(record)
        assert isinstance(body, list)
        task.chain.fed_back(body)
