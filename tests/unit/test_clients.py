"""``clients.watermark_offsets`` and ``clients.retried``: what a leader move, a coordinator
move or load, or a new topic answers is retried, anything else is raised at once."""

from __future__ import annotations

import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.config import Settings
from processor.kafka import clients


class _Answers:
    """A consumer whose ``get_watermark_offsets`` raises the given errors, then answers."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 7


def test_a_leader_move_is_waited_out() -> None:
    consumer = _Answers(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert clients.watermark_offsets(consumer, TopicPartition("t", 0)) == (3, 7)  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_a_lasting_error_is_raised() -> None:
    consumer = _Answers(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        clients.watermark_offsets(consumer, TopicPartition("t", 0))  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_that_never_comes_is_raised_at_the_deadline() -> None:
    consumer = _Answers(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):
        clients.watermark_offsets(consumer, TopicPartition("t", 0), timeout=0.5)  # type: ignore[arg-type]


class _Coordinator:
    """A group coordinator that answers ``errors`` first, then the committed offsets."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def committed(self) -> list[TopicPartition]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition("t", 0, 7)]


def test_a_coordinator_moving_or_loading_is_waited_out() -> None:
    # A broker started seconds before answers these until its offsets topic is loaded.
    group = _Coordinator(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    assert [tp.offset for tp in clients.retried(group.committed, 10, pause=0)] == [7]
    assert group.calls == 3


def test_retried_raises_a_lasting_error_at_once() -> None:
    group = _Coordinator(KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        clients.retried(group.committed, 10, pause=0)
    assert group.calls == 1


def test_retried_raises_a_transient_error_after_its_timeout() -> None:
    group = _Coordinator(*[KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException):
        clients.retried(group.committed, 0, pause=0)
    assert group.calls == 1


class _Assigned:
    """A consumer that records its calls; ``list_topics`` of ``refused`` fails."""

    def __init__(self, refused: str = "") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refused = refused

    def list_topics(self, topic: str, timeout: float) -> None:
        self.calls.append(("list_topics", topic))
        if topic == self.refused:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", [(tp.topic, tp.partition) for tp in partitions]))


@pytest.mark.parametrize("refused", ["", "a"])
def test_assign_looks_up_each_topic_first_and_assigns_whatever_the_lookup_says(
    refused: str,
) -> None:
    """`clients.assign`: the leaders known before a logical offset is to be resolved (see its
    docstring), once per topic; a lookup that fails does not keep the partitions unassigned."""
    consumer = _Assigned(refused)
    partitions = [TopicPartition("b", 0), TopicPartition("a", 1), TopicPartition("b", 2)]
    clients.assign(consumer, partitions)  # type: ignore[arg-type]
    assert consumer.calls == [
        ("list_topics", "a"),
        ("list_topics", "b"),
        ("assign", [("b", 0), ("a", 1), ("b", 2)]),
    ]


class _Positions:
    """A consumer whose cached watermark and position are ``high`` and ``position`` (-1001:
    not known before a fetch), and whose broker answers ``broker_high``."""

    def __init__(self, high: int, position: int, broker_high: int | None = 50) -> None:
        self.high, self.position_at, self.broker_high = high, position, broker_high
        self.asked_broker = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> Any:
        if cached:
            return -1001 if self.high < 0 else 0, self.high
        self.asked_broker += 1
        if self.broker_high is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return 0, self.broker_high

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.position_at) for tp in partitions]


@pytest.mark.parametrize(
    ("high", "position", "behind", "asked"),
    [
        (40, 30, 10, 0),  # both known: the cached answer
        (40, 40, 0, 0),  # caught up
        (-1001, 30, 20, 1),  # no fetch answered yet: the broker's high watermark
        (40, -1001, 20, 0),  # nothing read since the assign (at 20): from there
        (-1001, -1001, 30, 1),  # a task just started: not "nothing to read"
    ],
)
def test_behind_counts_from_the_assigned_offset_until_the_consumer_knows(
    high: int, position: int, behind: int, asked: int
) -> None:
    """`clients.behind`, a task's lag for the coordinator's idle count: unknown (-1001) was
    read as 0 before, so a task that had not fetched yet looked done."""
    consumer = _Positions(high, position)
    tp = TopicPartition("t", 0)
    assert clients.behind(consumer, tp, assigned=20) == behind  # type: ignore[arg-type]
    assert consumer.asked_broker == asked


def test_behind_is_not_caught_up_when_the_broker_does_not_answer() -> None:
    """No fetch answered and the broker's watermark not either (its leader away): the task is
    not counted caught up, and its checkpoint does not fail on the error."""
    consumer = _Positions(-1001, -1001)
    consumer.broker_high = None
    tp = TopicPartition("t", 0)
    assert clients.behind(consumer, tp, assigned=20) == 1  # type: ignore[arg-type]


class _Creating:
    """An admin client whose new topic's partition 1 gets its leader at the third look."""

    def __init__(self) -> None:
        self.looks = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.looks += 1
        leader = 1 if self.looks >= 4 else -1  # the first look is ensure_topic's "missing?"
        partitions = {0: SimpleNamespace(leader=1), 1: SimpleNamespace(leader=leader)}
        info = SimpleNamespace(error=None, partitions=partitions)
        return SimpleNamespace(topics={} if self.looks == 1 else {topic: info})

    def create_topics(self, topics: list[Any]) -> dict[str, Any]:
        done: Future[None] = Future()
        done.set_result(None)
        return {t.topic: done for t in topics}


def test_a_new_topic_is_usable_once_every_partition_has_a_leader() -> None:
    """A keyless producer puts nothing into a partition its first metadata shows without a
    leader until its next refresh (5 minutes): `ensure_topic` returns once all have one."""
    admin = _Creating()
    assert clients.ensure_topic(admin, "t", 2, timeout=5) == 2  # type: ignore[arg-type]
    assert admin.looks == 4


def test_a_consumer_fetches_again_soon_after_its_queue_was_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka's 1 s pause after a full queue would idle a task that drains it sooner;
    the user's PROCESSOR_KAFKA_CONFIG still decides."""
    assert clients.consumer_config(Settings())["fetch.queue.backoff.ms"] == 10
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", '{"fetch.queue.backoff.ms": "250"}')
    assert clients.consumer_config(Settings())["fetch.queue.backoff.ms"] == "250"


def test_the_user_tunes_a_consumers_fetching_but_not_its_isolation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PROCESSOR_KAFKA_CONFIG replaces the engine's fetch sizes and waits; read_committed, the
    group and the engine's own offset commits stay; a caller's override wins over both."""
    given = {
        "fetch.min.bytes": "65536",
        "fetch.wait.max.ms": "200",
        "queued.max.messages.kbytes": "1024",
        "isolation.level": "read_uncommitted",
        "enable.auto.commit": "true",
        "enable.auto.offset.store": "true",
        "group.id": "theirs",
    }
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps(given))
    config = clients.consumer_config(Settings(job_name="j"))
    assert config["fetch.min.bytes"] == "65536"
    assert config["fetch.wait.max.ms"] == "200"
    assert config["queued.max.messages.kbytes"] == "1024"
    assert config["isolation.level"] == "read_committed"
    assert config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["group.id"] == "j"
    control = clients.consumer_config(Settings(job_name="j"), **{"fetch.wait.max.ms": 500})
    assert control["fetch.wait.max.ms"] == 500
