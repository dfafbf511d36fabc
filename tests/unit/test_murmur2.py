"""`processor.models.murmur2`: Kafka's default partitioner, for the test harness to place keyed
input as Kafka does. The values were checked against librdkafka's ``murmur2_random``
partitioner on a 7-partition topic (300 keys of every length modulo 4, ASCII and UTF-8), and
the engine's sinks against a Java producer in tests/integration/test_sinks.py."""

from __future__ import annotations

import pytest

from processor.models.murmur2 import murmur2, partition_of


@pytest.mark.parametrize(
    ("key", "hashed", "partition"),
    [
        (b"", 275646681, 2),
        (b"a", 2731586172, 5),
        (b"ab", 316155434, 0),
        (b"abc", 479470107, 4),
        (b"abcd", 2971317748, 5),
        (b"u1", 745337584, 5),
        ("clé-é".encode(), 3218806076, 1),
    ],
)
def test_murmur2_is_kafka_s(key: bytes, hashed: int, partition: int) -> None:
    assert murmur2(key) == hashed
    assert partition_of(key, 7) == partition


def test_java_s_own_example() -> None:
    # Kafka's UtilsTest.testMurmur2: murmur2("21") == -973932308 as a Java int.
    assert murmur2(b"21") - (1 << 32) == -973932308
