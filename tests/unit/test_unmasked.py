"""A Kafka error hidden behind confluent-kafka's SystemError (upstream issue #1708) is the
one a failed task reports."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from processor.worker.service import unmasked


def test_the_kafka_error_behind_a_system_error_is_reported() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED))
    try:
        try:
            raise fenced
        except KafkaException as kafka:
            raise SystemError("<class 'logging.LogRecord'> returned a result") from kafka
    except SystemError as masked:
        assert unmasked(masked) is fenced
    plain = SystemError("no cause")
    assert unmasked(plain) is plain
    other = ValueError("x")
    assert unmasked(other) is other
