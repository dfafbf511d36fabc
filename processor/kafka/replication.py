"""How many copies the topics a job creates get: its internal topics (control, checkpoints,
shuffles, DLQ, late records) and the sinks and inputs it creates itself.

``PROCESSOR_REPLICATION_FACTOR`` decides; unset, it is ``min(3, brokers)`` with ``brokers``
the brokers the cluster's metadata lists when the job creates its topics: one copy on a
single broker, three on a production cluster. Three copies come with
``min.insync.replicas=2`` (a committed transaction survives the loss of any one broker),
unless the brokers' own ``min.insync.replicas`` is that already.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from processor.config import Settings

MIN_INSYNC = "min.insync.replicas"


@dataclass(frozen=True)
class Replication:
    """The replication factor of new topics and the topic settings that go with it."""

    factor: int = -1  # -1: the broker's default.replication.factor
    config: Mapping[str, str] = field(default_factory=dict)


def default_factor(brokers: int, configured: int | None) -> int:
    """The replication factor of new topics: the configured one, else ``min(3, brokers)``.

    >>> default_factor(1, None), default_factor(5, None), default_factor(5, 2)
    (1, 3, 2)
    """
    if configured is not None:
        return configured
    return max(1, min(3, brokers))


def min_insync(factor: int) -> int:
    """The ``min.insync.replicas`` that goes with ``factor`` copies: 2 from three copies on
    (production's RF 3 / min ISR 2), else 1 (two copies with a minimum of 2 would stop
    every write while either broker is down)."""
    return 2 if factor >= 3 else 1


def topic_config(factor: int, broker_min_insync: int) -> dict[str, str]:
    """Topic settings for ``factor`` copies: the minimum in-sync replicas, where the
    brokers' own (``broker_min_insync``) is below it.

    The brokers' value, not whether it is "set": since KIP-966 (eligible leader replicas,
    on by default in Kafka 4.1+) the controller itself writes a cluster-wide
    min.insync.replicas, Kafka's default of 1, as a dynamic config.

    >>> topic_config(3, 1), topic_config(3, 2), topic_config(2, 1)
    ({'min.insync.replicas': '2'}, {}, {})
    """
    wanted = min_insync(factor)
    if wanted <= broker_min_insync:
        return {}
    return {MIN_INSYNC: str(wanted)}


def topic_replication(settings: Settings, admin: AdminClient, timeout: float = 10) -> Replication:
    """The replication of the topics this job creates, from the settings and the cluster.

    Example::

        admin = clients.admin(settings)
        clients.ensure_topic(admin, "job.dlq", 1, replication=topic_replication(settings, admin))
    """
    metadata = admin.list_topics(timeout=timeout)
    # More copies than brokers listed is no error here: the topics may all exist (a restart
    # while a broker is down must work), and creating one fails with Kafka's own
    # INVALID_REPLICATION_FACTOR, which the coordinator retries until the broker is back.
    factor = default_factor(len(metadata.brokers), settings.replication_factor)
    if min_insync(factor) <= 1 or not metadata.brokers:
        return Replication(factor, topic_config(factor, 1))
    # Any broker answers for its own settings; the brokers of one cluster share them.
    broker_id = min(metadata.brokers)
    return Replication(factor, topic_config(factor, _broker_min_insync(admin, broker_id)))


def _broker_min_insync(admin: AdminClient, broker_id: int, timeout: float = 10) -> int:
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout)
        return int(configs[MIN_INSYNC].value)
    except (KafkaException, KeyError, TypeError, ValueError):
        # No right to describe the broker's configuration (ACLs): Kafka's default, so the
        # topic gets the setting production clusters want anyway.
        return 1
