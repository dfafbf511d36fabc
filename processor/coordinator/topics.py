"""The topics a job writes besides its sinks, created by the coordinator at every start.

- ``<job>.control``: heartbeats, barriers' triggers, the coordinator's lease; an hour.
- ``<job>.checkpoints``: the completed checkpoints, compacted.
- the shuffles (one per keyed stage): retention for ever, the keyed tasks purge them.
- ``<job>.dlq`` and ``<job>.late``: records a user may need to look at, and which hold user
  data: their retention is a setting (``PROCESSOR_DLQ_RETENTION_MS``,
  ``PROCESSOR_LATE_RETENTION_MS``), set again on each start, so that changing it takes effect
  on topics created before.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from processor.config import Settings, SettingsError
from processor.jobs.graph import JobGraph
from processor.kafka import clients
from processor.kafka.replication import topic_replication

log = logging.getLogger(__name__)


def create_job_topics(admin: AdminClient, settings: Settings, graph: JobGraph) -> None:
    """Create the job's topics that are missing, and set the retention of its DLQ and
    late-records topics."""
    s = settings
    # Every topic the job creates gets the cluster's replication (kafka/replication.py).
    rep = topic_replication(s, admin)
    for topic in graph.shuffle_topics:
        shuffle = clients.ensure_topic(
            admin, topic, s.shuffle_partitions, shuffle_topic_config(s), replication=rep
        )
        if shuffle != s.shuffle_partitions:
            raise SettingsError(
                f"invalid setting PROCESSOR_SHUFFLE_PARTITIONS: {topic} already has "
                f"{shuffle} partitions, not {s.shuffle_partitions}"
            )
    clients.ensure_topic(admin, s.control_topic, 1, {"retention.ms": "3600000"}, replication=rep)
    clients.ensure_topic(
        admin,
        s.checkpoints_topic,
        1,
        {"cleanup.policy": "compact", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"},
        replication=rep,
    )
    kept = {s.dlq_topic: s.dlq_retention_ms}
    if graph.plan.timed:
        kept[graph.late_topic] = s.late_retention_ms
    for topic, retention_ms in kept.items():
        config = {"retention.ms": str(retention_ms)}
        clients.ensure_topic(admin, topic, 1, config, replication=rep)
        set_topic_config(admin, topic, config)
    for topic in graph.plan.sink_topics:
        clients.ensure_topic(admin, topic, s.shuffle_partitions, replication=rep)


def shuffle_topic_config(settings: Settings) -> dict[str, str]:
    """Explicit retention for the shuffle: deletion is the keyed tasks' purge, not time.

    A segment rolls at least every 10 minutes, so that purged records free their disk within
    that (plus the broker's retention check) even when little flows.
    """
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(settings.shuffle_retention_ms),
        "segment.bytes": str(settings.shuffle_segment_bytes),
        "segment.ms": "600000",
    }


def set_topic_config(
    admin: AdminClient, topic: str, config: dict[str, str], timeout: float = 30
) -> bool:
    """Set ``config`` on an existing ``topic`` (an incremental alter: other settings stay);
    False, with a warning, if the broker refuses (no AlterConfigs right on the topic): the
    job runs on with the topic's settings as they are."""
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in config.items()
        ],
    )
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout)
    except KafkaException as exc:
        log.warning("could not set %s on topic %s: %s; it keeps its settings", config, topic, exc)
        return False
    return True
