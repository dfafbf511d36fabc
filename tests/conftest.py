"""Shared fixtures: one real Kafka broker per test session, an admin client, fresh topics."""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

# The documented import path; the package's stubs just omit NewTopic from __all__.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.kafka.broker import LocalBroker

# Away from the default 9092 so a developer's own broker (and its topics) stay untouched,
# and below Linux's ephemeral range (32768-60999): a client that keeps reconnecting to a
# port in that range while the broker is down can be given that very port as its source
# port and connect to itself (TCP simultaneous open), which then blocks the broker's bind.
TEST_PORT = 19092
TEST_CONTROLLER_PORT = 19093

NewTopicFactory = Callable[..., str]


@pytest.fixture(scope="session")
def local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker | None]:
    """The broker this session started, or None when PROCESSOR_TEST_BOOTSTRAP names one."""
    if os.environ.get("PROCESSOR_TEST_BOOTSTRAP"):
        yield None
        return
    broker = LocalBroker(
        port=TEST_PORT,
        controller_port=TEST_CONTROLLER_PORT,
        data_dir=tmp_path_factory.mktemp("kafka"),
    )
    broker.start(timeout=120)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(local_broker: LocalBroker | None) -> str:
    if local_broker is None:
        return os.environ["PROCESSOR_TEST_BOOTSTRAP"]
    return local_broker.bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[NewTopicFactory]:
    """``new_topic(partitions=1, config=None) -> name``: a topic no other test has touched."""
    created: list[str] = []
    # The test's name in the topic makes a leftover topic on a shared broker traceable.
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:150]

    def create(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"test.{stem}.{uuid.uuid4().hex[:10]}"
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)
        created.append(name)
        _wait_for_topic(admin, name, partitions)
        return name

    yield create

    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            # Cleanup is a courtesy to a shared broker; a failure must not fail the test.
            with contextlib.suppress(Exception):
                future.result(timeout=30)


def _wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout: float = 30) -> None:
    # CreateTopics returns once the controller has the topic; clients producing right away
    # need the broker's metadata to show every partition with a leader.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} did not appear with {partitions} partitions in {timeout}s")
