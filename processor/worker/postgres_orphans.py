"""Prepared transactions no running task resolves: those of a job's earlier name.

A task resolves its own writers' prepared transactions at its restore, and those of the
writers it replaced (`PostgresSinks.read_fences`: same job, same task, a sink renamed or
removed), because its Kafka transactional id is theirs. A job started from another job's
savepoint has another transactional id, so the old job's writers are resolved by a restore
of the old task that runs nothing (`resolve_task`): the same steps as a restore
(`processor.sinks.postgres.prepared`), under the old job's name. So are those that
``processor postgres prepared --resolve`` finds.

The rule is always the one of the restore: commit iff n is at or below the checkpoint the
task's committed offsets name (in the old job's consumer group), once every incarnation of
that task is fenced in Kafka.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from processor.jobs.graph import JobGraph, TaskId
from processor.kafka.output import open_output
from processor.worker.task import commit_metadata, committed_after_fencing

if TYPE_CHECKING:
    from processor.config import Settings
    from processor.sinks.postgres.writer import PostgresSinks, PostgresWriter

log = logging.getLogger(__name__)


def task_inputs(graph: JobGraph, task_id: str) -> list[TopicPartition]:
    """The partitions whose committed offsets (in the job's group) name the checkpoint task
    ``task_id`` of ``graph``'s job committed: a source task's partition of its topic (one
    each), a keyed task's of its stage's shuffle."""
    tid = TaskId.parse(task_id)
    stage = graph.stage(tid.stage)
    topic = stage.source.topic if stage.source is not None else graph.shuffle_topic(stage)
    return [TopicPartition(topic, tid.index)]


def resolve_task(
    settings: Settings, graph: JobGraph, task_id: str, writers: list[PostgresWriter]
) -> int:
    """A restore of task ``task_id`` of job ``graph.job_name`` that runs nothing, for
    ``writers`` (then closed): read their fences, fence every incarnation of the task in
    Kafka (one that runs fails, and restarts), read the checkpoint its committed offsets
    name, resolve their prepared transactions under it and raise their fences. Returns
    that checkpoint."""
    job = settings.model_copy(update={"job_name": graph.job_name})
    try:
        for writer in writers:
            writer.read_fence()
        out = open_output(job, f"{graph.job_name}.{task_id}")  # the task's transactional id
        try:
            out.init()
        finally:
            out.close()
        found = committed_after_fencing(job, task_inputs(graph, task_id))
        committed = max((int(commit_metadata(tp).get("checkpoint", 0)) for tp in found), default=0)
        for writer in writers:
            writer.recover(committed)
    finally:
        for writer in writers:
            writer.close()
    return committed


def after_savepoint(
    settings: Settings, graph: JobGraph, task_id: str, sinks: PostgresSinks
) -> None:
    """A task's first start in a job started from another job's savepoint: the prepared
    transactions the old job's namesake of this task left (it crashed, or ran an older
    version) are resolved as that job's Kafka transactions decided. Only for writers that
    have some: a job forked from a savepoint beside its original (into another table of
    the database) fences the original's task only if it finds one prepared."""
    from processor.state.savepoints import open_savepoint

    if not settings.from_savepoint:
        return
    _, savepoint = open_savepoint(settings)
    if savepoint.job == settings.job_name:
        return
    writers = [w for w in sinks.writers_of(savepoint.job) if w.has_prepared()]
    if not writers:
        return
    names = ", ".join(w.writer for w in writers)
    committed = resolve_task(settings, JobGraph(savepoint.job, graph.plan), task_id, writers)
    log.info(
        "%s: resolved what %s (job %s, checkpoint %d committed) left prepared",
        task_id,
        names,
        savepoint.job,
        committed,
    )
