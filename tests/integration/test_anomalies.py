"""tests/anomalies.py on a real broker's logs: committed and aborted transactions of two
producers across partitions are told apart from Kafka's own dumps, and a reader that sees
aborted records (read_uncommitted, standing in for a broken read_committed) is caught."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer

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


def _fence_a_live_zombie(bootstrap: str, topic: str, txn_id: str) -> None:
    """A producer fenced mid-transaction while it keeps producing into both partitions (a
    worker whose tasks moved while it ran on), then its next incarnation's leftovers' abort
    and two commits, each into both partitions."""
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    fenced = threading.Event()

    def produce() -> None:
        i = 0
        while not fenced.is_set():
            try:
                zombie.produce(topic, b"zombie", partition=i % 2)
                zombie.poll(0)  # raises the fatal error too, once a delivery finds it fenced
            except (KafkaException, BufferError):
                return  # fenced
            i += 1
            time.sleep(0.0005)

    spinning = threading.Thread(target=produce)
    spinning.start()
    try:
        time.sleep(0.2)
        fresh = Producer(conf)
        fresh.init_transactions(30)  # fences the zombie: its open transaction is aborted
        fresh.begin_transaction()
        for p in (0, 1):
            fresh.produce(topic, b"", partition=p)
        fresh.flush(30)
        fresh.abort_transaction(30)
        for _ in range(2):
            fresh.begin_transaction()
            for p in (0, 1):
                fresh.produce(topic, b"committed", partition=p)
            fresh.commit_transaction(30)
    finally:
        fenced.set()
        spinning.join()
    with contextlib.suppress(KafkaException):  # fenced: what it still had is refused
        zombie.flush(5)


def _made_after_their_abort(broker: LocalBroker, topic: str, prefix: str) -> int:
    """Records of the zombies (epoch 0) made after the coordinator logged their fence's
    abort (epoch 1), from the brokers' logs."""
    data = broker.data_dir / "data"
    files = sorted(f for d in data.glob(f"{topic}-*") for f in d.glob("*.log"))
    segments = anomalies.parse_segments(anomalies.dump_lines(files, "--deep-iteration"))
    txn_files = sorted(data.glob(f"{anomalies.TXN_LOG}-*/*.log"))
    log = anomalies.parse_txn_log(anomalies.dump_lines(txn_files, "--transaction-log-decoder"))
    fenced_at = {
        pid: d.at_ms
        for pid, decisions in log.decisions.items()
        for d in decisions
        if d.txn_id.startswith(prefix) and d.epoch == 1
    }
    return sum(
        b.last - b.base + 1
        for batches in segments.values()
        for b in batches
        if not b.control and b.epoch == 0 and b.max_ms > fenced_at.get(b.producer, b.max_ms)
    )


def test_a_live_zombies_records_made_after_its_fence_stay_its_own(
    local_broker: LocalBroker | None, kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    """A zombie fenced while it still produces gets records it makes after the coordinator
    logged the fence's abort into the log before the abort's marker. Matched by their
    timestamps, such a run took the next incarnation's leftovers' abort, and every later run
    the decision after its own: "decided COMMIT, marker here ABORT" at the leftovers' record
    and "matches no logged decision" at the last one (test_chaos_short, seed 7, once under
    load). The check must find no anomaly. Rounds go on until the race has happened (about
    every other round on a quiet machine)."""
    if local_broker is None:
        pytest.skip("reads the log files of the broker this session started")
    topic = new_topic(partitions=2)
    prefix = f"zombies-{uuid.uuid4().hex[:8]}."
    rounds = late = 0
    while not late and rounds < 30:
        for _ in range(5):
            rounds += 1
            _fence_a_live_zombie(kafka_bootstrap, topic, f"{prefix}{rounds}")
        late = _made_after_their_abort(local_broker, topic, prefix)
    assert late, f"no zombie record made after its fence in {rounds} rounds"

    found = anomalies.check(kafka_bootstrap, anomalies.log_dirs([local_broker]), [topic], prefix)
    assert found.clean, found.to_json()
    # Every round: the zombie's, the leftovers' and two commits, each in both partitions.
    assert found.transactions == rounds * 4 * 2, found.to_json()
