"""A job's first start from a savepoint: the coordinator checks it against the pipeline and
commits its source positions as the job's (the keyed tasks load its state themselves)."""

from __future__ import annotations

import json
import logging

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.config import Settings, SettingsError
from processor.jobs.graph import JobGraph
from processor.state.format import STATE_FORMAT
from processor.state.savepoints import SavepointError, open_savepoint
from processor.state.storage import SnapshotMissing
from processor.worker.task import committed_after_fencing

log = logging.getLogger(__name__)


def apply_savepoint(
    settings: Settings, graph: JobGraph, admin: AdminClient, sources: dict[str, int]
) -> None:
    """Commit the savepoint's source positions as the job's, on its first start only.

    The keyed tasks load their state from the savepoint themselves (they have no commit
    of their own yet). A job that has committed positions already started from it, or
    is another job: the savepoint is not applied again.
    """
    s = settings
    if graph.plan.loops:
        raise SettingsError(
            "invalid setting PROCESSOR_FROM_SAVEPOINT: the pipeline has a loop, and a "
            "savepoint does not hold the records in flight round it (docs/loops.md)"
        )
    try:
        _, savepoint = open_savepoint(s)
    except (SavepointError, SnapshotMissing) as exc:
        raise SettingsError(f"invalid setting PROCESSOR_FROM_SAVEPOINT: {exc}") from None
    if savepoint.state_format != STATE_FORMAT:
        raise SettingsError(
            f"savepoint {s.from_savepoint!r} holds state in format "
            f"{savepoint.state_format!r}, not {STATE_FORMAT!r}"
        )
    stateful = {n.name for stage in graph.stages for n in stage.stateful}
    dropped = sorted(savepoint.stateful_operators - stateful)
    if dropped and not s.allow_dropped_state:
        raise SettingsError(
            f"savepoint {s.from_savepoint!r} has state of operators the pipeline does not "
            f"have: {', '.join(dropped)} (PROCESSOR_ALLOW_DROPPED_STATE=true drops it)"
        )
    wanted = [TopicPartition(t, p) for t, n in sources.items() for p in range(n)]
    if any(tp.offset >= 0 for tp in committed_after_fencing(s, wanted)):
        log.info(
            "job %s has committed positions: it started from savepoint %s already (or is "
            "another job), which is not applied again",
            s.job_name,
            s.from_savepoint,
        )
        return
    meta = json.dumps({"checkpoint": 0, "savepoint": s.from_savepoint})
    offsets = []
    for topic, partitions in sources.items():
        saved = savepoint.sources.get(topic, {})
        if not saved:
            log.warning(
                "savepoint %s has no positions in %s: read from the start",
                s.from_savepoint,
                topic,
            )
        for p, offset in sorted(saved.items()):
            if p >= partitions:
                raise SettingsError(
                    f"savepoint {s.from_savepoint!r} has positions in {topic}[{p}], "
                    f"which has {partitions} partitions"
                )
            offsets.append(TopicPartition(topic, p, offset, metadata=meta))
    if offsets:
        request = [ConsumerGroupTopicPartitions(s.group_id, offsets)]
        futures = admin.alter_consumer_group_offsets(request, request_timeout=60)
        for tp in futures[s.group_id].result().topic_partitions:
            if tp.error is not None:
                raise KafkaException(tp.error)
    log.info(
        "job %s starts from savepoint %s (checkpoint %d of job %s)",
        s.job_name,
        s.from_savepoint,
        savepoint.checkpoint_id,
        savepoint.job,
    )
