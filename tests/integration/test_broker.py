"""The local broker against real clients: plain delivery and transactional visibility."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer

from processor.localkafka.broker import LocalBroker
from tests.conftest import NewTopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _consume(
    bootstrap: str, topic: str, *, isolation: str, until: int, timeout: float = 30
) -> list[tuple[bytes | None, bytes | None]]:
    """Records from the start of ``topic`` until ``until`` arrived or ``timeout`` passed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < until and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                error = msg.error()
                if error is None:
                    records.append((msg.key(), msg.value()))
                else:
                    assert error.retriable(), error
    finally:
        consumer.close()
    return records


def _txn_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    return producer


def test_produce_consume_round_trip(kafka_bootstrap: str, new_topic: NewTopicFactory) -> None:
    topic = new_topic(partitions=3)
    sent = {(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)}
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _msg: Message) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value in sent:
        producer.produce(topic, value, key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []

    got = _consume(kafka_bootstrap, topic, isolation="read_uncommitted", until=len(sent))
    assert sorted(got) == sorted(sent)


def test_committed_transaction_is_visible(kafka_bootstrap: str, new_topic: NewTopicFactory) -> None:
    topic = new_topic(partitions=2)
    producer = _txn_producer(kafka_bootstrap)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(topic, f"c{i}".encode(), f"k{i}".encode())
    producer.commit_transaction(30)

    got = _consume(kafka_bootstrap, topic, isolation="read_committed", until=50)
    assert sorted(got) == sorted((f"k{i}".encode(), f"c{i}".encode()) for i in range(50))


def test_aborted_transaction_is_invisible(kafka_bootstrap: str, new_topic: NewTopicFactory) -> None:
    topic = new_topic(partitions=1)
    producer = _txn_producer(kafka_bootstrap)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, f"aborted{i}".encode())
    producer.flush(30)  # the records reach the log, so only the abort marker hides them
    producer.abort_transaction(30)
    # A committed record after the aborted ones: once a reader has it, it has passed the
    # aborted batch, so "not seen" means "filtered", not "not yet arrived".
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)

    committed = _consume(kafka_bootstrap, topic, isolation="read_committed", until=1)
    assert [v for _, v in committed] == [b"committed"]
    # Same log through read_uncommitted: the aborted records really are there.
    raw = _consume(kafka_bootstrap, topic, isolation="read_uncommitted", until=21)
    assert len(raw) == 21


def test_start_is_idempotent(local_broker: LocalBroker | None) -> None:
    if local_broker is None:
        pytest.skip("PROCESSOR_TEST_BOOTSTRAP names an external broker")
    pid = local_broker.pid_file.read_text().strip()

    started = time.monotonic()
    local_broker.start()
    # Same data_dir seen from a fresh object, as a second `processor kafka start` would.
    twin = LocalBroker(
        port=local_broker.port,
        controller_port=local_broker.controller_port,
        data_dir=local_broker.data_dir,
        cache_dir=local_broker.cache_dir,
    )
    twin.start()
    elapsed = time.monotonic() - started

    assert elapsed < 10, f"start() on a running broker took {elapsed:.1f}s"
    assert local_broker.pid_file.read_text().strip() == pid
    assert twin.status() == f"running pid {pid} on {local_broker.bootstrap}"
