"""tests/anomalies.py on a real broker's logs: committed and aborted transactions of two
producers across partitions are told apart from Kafka's own dumps, and a reader that sees
aborted records (read_uncommitted, standing in for a broken read_committed) is caught."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from processor.localkafka.broker import LocalBroker
from tests import anomalies
from tests.conftest import NewTopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROUNDS = 4  # transactions per producer; the third aborts
PER_ROUND = 6  # records per transaction, over both partitions


def test_committed_aborted_and_open_transactions_from_the_logs(
    local_broker: LocalBroker | None, kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    if local_broker is None:
        pytest.skip("reads the log files of the broker this session started")
    topic = new_topic(partitions=2)
    prefix = f"anomalies-{uuid.uuid4().hex[:8]}."
    aborted = 0
    left_open: list[Producer] = []
    for name in ("a", "b"):
        producer = Producer(
            {"bootstrap.servers": kafka_bootstrap, "transactional.id": prefix + name}
        )
        producer.init_transactions(30)
        for i in range(ROUNDS):
            producer.begin_transaction()
            for k in range(PER_ROUND):
                producer.produce(topic, f"{name}-{i}-{k}".encode(), partition=k % 2)
            producer.flush(30)
            if i == 2:
                producer.abort_transaction(30)
                aborted += PER_ROUND
            else:
                producer.commit_transaction(30)
        left_open.append(producer)
    dirs = anomalies.log_dirs([local_broker])

    found = anomalies.check(kafka_bootstrap, dirs, [topic], prefix)
    assert found.clean, found.to_json()
    assert found.records == 2 * ROUNDS * PER_ROUND
    assert found.transactions == 2 * ROUNDS * 2  # each transaction in both partitions

    # A reader shown the aborted records: every one of them is an aborted read.
    seen_all = anomalies.check(kafka_bootstrap, dirs, [topic], prefix, isolation="read_uncommitted")
    assert seen_all.aborted_reads == aborted
    assert (seen_all.hidden_commits, seen_all.torn) == (0, 0)

    # A transaction left open is reported by its transactional id.
    producer = left_open[0]
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(30)
    still_open = anomalies.check(kafka_bootstrap, dirs, [topic], prefix)
    assert still_open.open_transactions == [prefix + "a"]
    producer.abort_transaction(30)
