"""``processor kafka start --brokers 3``: a real three-node KRaft cluster whose internal and
job topics have three copies, and whose ``start`` brings a killed broker back in sync."""

from __future__ import annotations

import gc
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

# The documented import path; the package's stubs just omit it from __all__.
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from processor.config import Settings
from processor.coordinator.service import CoordinatorService
from processor.kafka import clients
from processor.kafka.replication import topic_replication
from processor.localkafka import cluster
from processor.localkafka.brokertools import wait_exit
from processor.localkafka.cluster import LocalCluster
from tests.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

# Away from the session's broker (19092/19093), the chaos run's (19292), the SASL test's
# (19392) and a developer's 9092, and below Linux's ephemeral range like every test port (see
# tests/conftest.py: a client's source port there can take a broker's port; in CI one did, and
# no node started). The controllers take 19592-19594.
PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_CLUSTER_PORT", "19492")))


def _replicas(admin: AdminClient, topic: str) -> list[tuple[int, int]]:
    """(copies, copies in sync) of each partition of ``topic``."""
    info = admin.list_topics(topic, timeout=10).topics[topic]
    assert info.error is None, info.error
    return [(len(p.replicas), len(p.isrs)) for p in info.partitions.values()]


def _create_offsets_topic(bootstrap: str, group: str, topic: str) -> None:
    """The offsets topic comes with the first group coordinator lookup; until its
    partitions have leaders and are loaded, the lookup answers NOT_COORDINATOR."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                consumer.committed([TopicPartition(topic, 0)], timeout=10)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _min_insync(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return str(admin.describe_configs([resource])[resource].result(10)["min.insync.replicas"].value)


def test_three_brokers_replicate_and_a_killed_one_comes_back(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka"
    nodes = LocalCluster(nodes=3, port=PORT, data_dir=data_dir, heap="384m")
    nodes.start(timeout=300)
    try:
        _check(nodes, data_dir)
    finally:
        # Every client of the check is gone by now: none keeps reconnecting to the
        # stopped brokers for the rest of the session.
        gc.collect()
        assert cluster.main(["stop", "--port", str(PORT), "--data-dir", str(data_dir)]) == 0
    assert [node.pid for node in nodes.status()] == [None, None, None]


def _check(nodes: LocalCluster, data_dir: Path) -> None:
    settings = Settings(
        bootstrap_servers=nodes.bootstrap,
        job_name=f"cluster-{uuid.uuid4().hex[:8]}",
        input_topic=f"cluster-in-{uuid.uuid4().hex[:8]}",
        output_topic=f"cluster-out-{uuid.uuid4().hex[:8]}",
        shuffle_partitions=2,
    )
    admin = clients.admin(settings)
    clients.ensure_topic(
        admin, settings.input_topic, 2, replication=topic_replication(settings, admin)
    )
    # The job's own topics, made the way every job start makes them.
    CoordinatorService(settings).setup()
    _create_offsets_topic(nodes.bootstrap, settings.group_id, settings.input_topic)

    for topic in ("__transaction_state", "__consumer_offsets"):
        assert {copies for copies, _ in _replicas(admin, topic)} == {3}, topic
    job_topics = [
        settings.input_topic,
        settings.output_topic,
        settings.shuffle_topic,
        settings.control_topic,
        settings.checkpoints_topic,
        settings.dlq_topic,
    ]
    for topic in job_topics:
        assert _replicas(admin, topic) and set(_replicas(admin, topic)) == {(3, 3)}, topic
        assert _min_insync(admin, topic) == "2", topic

    victim = nodes.broker(2)
    pid = victim.status_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert wait_exit(pid, None, 10)
    assert cluster.main(["status", "--port", str(PORT), "--data-dir", str(data_dir)]) == 1

    # The same command as the first start, from the CLI: only the dead node starts.
    pids = {node.node_id: node.pid for node in nodes.status()}
    argv = ["start", "--brokers", "3", "--port", str(PORT), "--data-dir", str(data_dir)]
    assert cluster.main(argv) == 0
    after = {node.node_id: node.pid for node in nodes.status()}
    assert after[1] == pids[1] and after[3] == pids[3]
    assert after[2] not in (None, pid)
    assert cluster.main(["status", "--port", str(PORT), "--data-dir", str(data_dir)]) == 0
    for topic in ["__transaction_state", *job_topics]:
        assert set(_replicas(admin, topic)) == {(3, 3)}, topic
