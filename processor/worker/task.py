"""What every task has: its identity, its reporting channel, its lifecycle, its local state dir."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from processor.config import Settings
from processor.jobs.graph import JobGraph, TaskId
from processor.kafka import clients
from processor.kafka.purge import ShufflePurger
from processor.models.control import Ack
from processor.models.control import Message as ControlMessage
from processor.plan.stages import Stage
from processor.processes import pid_alive
from processor.state.dirs import private_dir
from processor.state.query_gate import TaskGate

if TYPE_CHECKING:
    from processor.sinks.postgres.writer import PostgresSinks

log = logging.getLogger(__name__)

_PARTITION_EOF = KafkaError._PARTITION_EOF


@dataclass
class TaskContext:
    settings: Settings
    graph: JobGraph
    task_id: str
    worker_id: str
    # Input channels of a keyed task: the tasks of the stage upstream (unused by sources).
    input_partitions: int
    report: Callable[[ControlMessage], None]
    stop: threading.Event
    purger: ShufflePurger | None = None  # the worker's for the task's shuffle topic
    feedback_purger: ShufflePurger | None = None  # and for its loop's feedback topic
    # Tasks per stage (the assignment's): where a task's channels begin in a join's input.
    parallelism: dict[str, int] = field(default_factory=dict)
    # Where requests read a keyed task's state (PROCESSOR_STATE_API=on), else None.
    query: TaskGate | None = None

    @property
    def stage(self) -> Stage:
        return self.graph.stage(TaskId.parse(self.task_id).stage)

    def channel_layout(self) -> list[list[Any]]:
        """What a keyed task's channel numbers mean (`processor.worker.layout`)."""
        # Without the assignment's stage sizes (a test's context) a one-input stage's
        # channels are its upstream's tasks.
        stage = self.stage
        sizes = self.parallelism or {u.name: self.input_partitions for u in stage.upstreams}
        return self.graph.channel_layout(stage, sizes)


class Triggers:
    """What a task at a source knows of the coordinator's triggers (its epochs end at
    them): only the newest matters, older ones are superseded; a drain is for good (the
    job's input is done, event time ends at the next checkpoint)."""

    def __init__(self) -> None:
        self.requested = 0
        self.requested_at = 0.0  # wall-clock time the coordinator triggered it
        self.draining = False

    def offer(self, checkpoint_id: int, triggered_at: float, drain: bool) -> None:
        """Trigger ``checkpoint_id`` (from the worker's control thread). The time goes
        first: the task thread reads ``requested``, then ``requested_at``."""
        self.draining = self.draining or drain
        if checkpoint_id > self.requested:
            self.requested_at = triggered_at
            self.requested = checkpoint_id


@dataclass
class ClosedEpoch:
    """Checkpoint n of a task past its synchronous part, until it is acknowledged."""

    checkpoint_id: int
    sync_s: float  # wall time of the synchronous part (see Ack.sync_s)
    sync_cpu_s: float
    flush_cpu_s: float
    records_in: int
    records_out: int
    lag: int
    positions: dict[str, int]
    busy_cpu_s: float = 0.0  # the task thread's CPU time over the epoch (see Ack.busy_cpu_s)

    def ack(self, ctx: TaskContext, commit_s: float, **snapshot: Any) -> Ack:
        """The acknowledgement, once the epoch's transaction committed."""
        return Ack(
            task=ctx.task_id,
            checkpoint=self.checkpoint_id,
            worker=ctx.worker_id,
            records_in=self.records_in,
            records_out=self.records_out,
            lag=self.lag,
            positions=self.positions,
            sync_s=round(self.sync_s, 6),
            sync_cpu_s=round(self.sync_cpu_s, 6),
            flush_cpu_s=round(self.flush_cpu_s, 6),
            busy_cpu_s=round(self.busy_cpu_s, 6),
            commit_s=round(commit_s, 6),
            **snapshot,
        )


class Task:
    """Base of the two task kinds: lifecycle state and the last committed checkpoint."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.state = "starting"  # starting -> running -> (stopped | failed)
        self.last_checkpoint = 0
        self.labels = {"job_name": ctx.settings.job_name, "task": ctx.task_id}
        self._records_in = 0  # in the current epoch
        self._cpu_mark: float | None = None  # the task thread's CPU time at the last barrier
        self._records_out = 0
        # Its sinks into PostgreSQL tables, if any: prepared at checkpoints, committed after.
        self.postgres = postgres_sinks(ctx)

    def output_topics(self) -> list[str]:
        """Every topic the task writes to: downstream shuffles, sinks, the DLQ."""
        graph, stage = self.ctx.graph, self.ctx.stage
        return [
            *(graph.shuffle_topic(n.name) for n in stage.shuffles),
            *([graph.feedback_topic(stage)] if stage.loop is not None else []),
            *(n.topic for n in stage.sinks),
            self.settings.dlq_topic,
            *([graph.late_topic] if stage.timed else []),
        ]

    def shuffle_outputs(self) -> list[tuple[str, str, int, int]]:
        """Per downstream shuffle: (key_by name, topic, partitions, this task's channel in
        it), for records and barriers."""
        graph, stage, index = self.ctx.graph, self.ctx.stage, TaskId.parse(self.ctx.task_id).index
        partitions = self.settings.shuffle_partitions
        return [
            (
                n.name,
                graph.shuffle_topic(n.name),
                partitions,
                graph.channel_base(n.name, self.ctx.parallelism, stage.name) + index,
            )
            for n in stage.shuffles
        ]

    @property
    def transactional_id(self) -> str:
        # Stable per task, whichever worker runs it: that is what fences a zombie.
        return f"{self.settings.job_name}.{self.ctx.task_id}"

    def run(self) -> None:
        raise NotImplementedError

    def request_checkpoint(
        self, checkpoint_id: int, triggered_at: float, drain: bool = False
    ) -> None:
        """Only source tasks act on triggers; others get barriers in their input."""

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (every task committed it): only source
        tasks act on it (their early writes wait for it)."""

    def _close_epoch(
        self,
        checkpoint_id: int,
        started: tuple[float, float],
        waited_s: float,
        flush_cpu_s: float,
        lag: int,
        positions: dict[str, int],
    ) -> ClosedEpoch:
        """End of checkpoint n's synchronous part, begun at ``started`` (monotonic, thread
        CPU time); ``waited_s`` is the epoch's earlier waits for checkpoint n-1."""
        # Read once a checkpoint, never per batch: what the status page shows as busy.
        cpu_now = time.thread_time()
        busy = cpu_now - self._cpu_mark if self._cpu_mark is not None else 0.0
        self._cpu_mark = cpu_now
        epoch = ClosedEpoch(
            checkpoint_id,
            time.monotonic() - started[0] + waited_s,
            time.thread_time() - started[1],
            flush_cpu_s,
            self._records_in,
            self._records_out,
            lag,
            positions,
            busy,
        )
        self._records_in = self._records_out = 0
        return epoch


def postgres_sinks(ctx: TaskContext) -> PostgresSinks | None:
    """The task's PostgreSQL sinks; None, and psycopg never imported, for a stage without."""
    if not ctx.stage.postgres_sinks:
        return None
    from processor.sinks.postgres.writer import PostgresSinks

    stages = [s.name for s in ctx.graph.stages]
    return PostgresSinks.of(ctx.settings, ctx.task_id, ctx.stage, stages)


def check(msg: Message) -> bool:
    """True for a data message; raise on a real error, False on informational events."""
    err = msg.error()
    if err is None:
        return True
    if err.code() == _PARTITION_EOF:
        return False
    raise KafkaException(err)


# A batch's values, their Kafka timestamps (if asked for) and the partitions they came from.
Scanned = tuple[list[bytes], list[int] | None, set[int]]
_SECOND = itemgetter(1)


def scan(msgs: list[Message], kafka_times: bool, positions: dict[int, int]) -> Scanned | None:
    """A batch of data messages, each with a value, in C loops over the batch: its values,
    their Kafka timestamps if ``kafka_times``, and its partitions, each partition's next
    offset put into ``positions``; None if a message is an event, an error or has no value
    (then `check` each). A source's batch, 500 to 10,000 messages, comes this way."""
    if any(map(Message.error, msgs)):  # (not a count of None: KafkaError == None fails)
        return None
    values = list(map(Message.value, msgs))
    if not all(values):
        return None
    partitions = set(map(Message.partition, msgs))
    if len(partitions) == 1:
        (partition,) = partitions
        positions[partition] = msgs[-1].offset() + 1  # type: ignore[index,operator]
    else:  # the last offset of each partition
        last = dict(zip(map(Message.partition, msgs), map(Message.offset, msgs), strict=True))
        positions.update((p, o + 1) for p, o in last.items())  # type: ignore[operator,misc]
    times = list(map(_SECOND, map(Message.timestamp, msgs))) if kafka_times else None
    return cast(list[bytes], values), times, cast(set[int], partitions)


def committed_after_fencing(
    settings: Settings, partitions: list[TopicPartition]
) -> list[TopicPartition]:
    """The task's committed input positions; call only after ``init_transactions``.

    Only this task's transactional id commits offsets for its partitions, and its
    ``init_transactions`` returns only once every earlier transaction of that id is complete
    (committed, or aborted with its markers written). From then on the last *stable* offset
    is the answer, and it is read without ``require_stable`` on purpose: a zombie's offset
    commit that reached the group coordinator after its transaction was aborted (seen after
    a broker restart) stays pending forever, and a stable read would wait on it forever.
    """
    config = clients.common_config(settings)
    result = clients.committed_offsets(config, settings.group_id, partitions, timeout=60)
    for tp in result:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return result


def output_partitions(consumer: Consumer, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` (those that exist)."""
    found: list[TopicPartition] = []
    for topic in sorted(set(topics)):
        partitions = clients.topic_partitions(consumer, topic) or 0
        found.extend(TopicPartition(topic, p) for p in range(partitions))
    return found


def commit_metadata(tp: TopicPartition) -> dict[str, Any]:
    """What a committed offset's metadata says: the checkpoint id (and, for a keyed task, the
    owner of the snapshot that holds its channel positions)."""
    if tp.offset < 0 or not tp.metadata:
        return {}
    try:
        data = json.loads(tp.metadata)
    except ValueError:
        log.warning("ignoring unreadable commit metadata on %s[%d]", tp.topic, tp.partition)
        return {}
    return data if isinstance(data, dict) else {}


def local_dir(settings: Settings, task_id: str) -> Path:
    """A fresh local directory for this incarnation of the task.

    Named by pid, so that directories left by dead processes can be removed safely while a
    live incarnation elsewhere on this machine (a zombie) keeps its own.
    """
    # Each level checked: the cleanup below must only ever remove this user's directories.
    base = private_dir(settings.state_dir, "PROCESSOR_STATE_DIR")
    for part in (settings.job_name, task_id):
        base = private_dir(base / part, "PROCESSOR_STATE_DIR")
    for old in base.iterdir():
        pid = old.name.split("-", 1)[0]
        # An earlier incarnation in this very process has ended too.
        if pid.isdigit() and (int(pid) == os.getpid() or not pid_alive(int(pid))):
            shutil.rmtree(old, ignore_errors=True)
    path = base / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o700)
    return path
