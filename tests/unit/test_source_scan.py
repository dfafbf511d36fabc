"""`processor.worker.task.scan`: a source's batch read in C loops, or None where the
message-at-a-time loop (`check`) must look."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message

from processor.worker.task import scan


def message(
    partition: int, offset: int, value: bytes | None = b"v", error: KafkaError | None = None
) -> Message:
    return Message(
        topic="t",
        partition=partition,
        offset=offset,
        value=value,
        timestamp=(1, offset * 10),
        error=error,
    )


def test_a_batch_of_data_gives_its_values_times_partitions_and_next_offsets() -> None:
    msgs = [message(3, o, b"%d" % o) for o in range(5, 9)]
    positions = {3: 1, 4: 7}
    assert scan(msgs, True, positions) == ([b"5", b"6", b"7", b"8"], [50, 60, 70, 80], {3})
    assert positions == {3: 9, 4: 7}
    assert scan(msgs, False, positions) == ([b"5", b"6", b"7", b"8"], None, {3})


def test_each_partition_of_a_mixed_batch_moves_to_after_its_last_offset() -> None:
    msgs = [message(1, 10), message(2, 20), message(1, 11), message(2, 21), message(1, 12)]
    positions: dict[int, int] = {}
    assert scan(msgs, False, positions) == ([b"v"] * 5, None, {1, 2})
    assert positions == {1: 13, 2: 22}


def test_an_event_an_error_or_a_record_without_value_leaves_the_batch_to_the_loop() -> None:
    eof = message(1, 3, error=KafkaError(KafkaError._PARTITION_EOF))
    for odd in (message(1, 3, None), message(1, 3, b""), eof):
        positions = {1: 0}
        assert scan([message(1, 1), odd, message(1, 4)], True, positions) is None
        assert positions == {1: 0}  # untouched: the loop sets them
