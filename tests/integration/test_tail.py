"""``processor tail``: what a topic holds as committed, decoded, for any sink."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer

from tests.conftest import NewTopicFactory

pytestmark = pytest.mark.integration


def _tail(bootstrap: str, *args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "processor", "tail", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PROCESSOR_BOOTSTRAP_SERVERS": bootstrap},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.fixture
def topic(kafka_bootstrap: str, new_topic: NewTopicFactory) -> str:
    """One partition: 15 committed records (one not JSON, one without a key) around an
    aborted transaction, whose records must never show."""
    name = new_topic()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tail-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(name, b'{"n": %d}' % i, key=b"k%d" % i)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(name, b'{"aborted": true}', key=b"x")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(name, b"\xffnot json", key=b"bad")
    producer.produce(name, b'"no key"')
    for i in range(10, 13):
        producer.produce(name, b'{"n": %d}' % i, key=b"k%d" % i)
    producer.commit_transaction(30)
    return name


def test_tail_shows_every_committed_record_decoded(kafka_bootstrap: str, topic: str) -> None:
    lines = _tail(kafka_bootstrap, topic, "--from-beginning")
    expected = [f'k{i}\t{{"n":{i}}}' for i in range(10)]
    expected += ["bad\tb'\\xffnot json'", '-\t"no key"']
    expected += [f'k{i}\t{{"n":{i}}}' for i in range(10, 13)]
    assert lines == expected


def test_tail_shows_the_last_ten_by_default(kafka_bootstrap: str, topic: str) -> None:
    lines = _tail(kafka_bootstrap, topic, "--format", "text", "--meta")
    # The last 10 offsets hold 7 committed records (the aborted one and the markers are
    # offsets too), each shown with its partition:offset and time.
    assert [line.split("\t", 2)[2] for line in lines][-3:] == [
        f'k{i}\t{{"n": {i}}}' for i in range(10, 13)
    ]
    assert all(line.startswith("0:") for line in lines)
    assert "aborted" not in "\n".join(lines)


def test_tail_of_a_missing_topic_says_so(kafka_bootstrap: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "processor", "tail", f"missing-{uuid.uuid4().hex[:6]}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap},
    )
    assert result.returncode != 0
    assert "does not exist" in result.stderr


def test_tail_latest_shows_each_keys_last_record(
    kafka_bootstrap: str, new_topic: NewTopicFactory
) -> None:
    """An aggregation's changelog as a table: per key its last value, sorted by key, over
    every partition; a record without a key is the key ``-``, first."""
    name = new_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value, partition in [
        (b"b", b"1", 0),
        (b"a", b"1", 1),
        (b"b", b"2", 0),
        (None, b"9", 1),
        (b"a", b"3", 1),
    ]:
        producer.produce(name, value, key=key, partition=partition)
    producer.flush(30)
    assert _tail(kafka_bootstrap, name, "--latest") == ["-\t9", "a\t3", "b\t2"]
