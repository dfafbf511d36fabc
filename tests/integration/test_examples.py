"""Every example of examples/ run by the engine (a coordinator and two workers as processes),
one worker SIGKILLed mid-stream and replaced: the committed output, read back by a reader of
its own, is exactly what processor.testing (the same stage code, in memory, without failures)
gives for the same input, and the DLQ holds exactly the records it finds dead. Aggregations'
changelogs compare by their final value per key (their updates depend on where checkpoints
fall); every other sink, windows and joins included, record for record."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from processor.commands import corpus
from processor.testing import Driver
from tests import chaincheck, timecheck
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOT_UTF8 = b"\xff\xfe not utf8"
NOT_JSON = b'{"oops": '


def _spread(good: list[bytes], bad: list[bytes], seed: int) -> list[bytes]:
    """``good`` with the ``bad`` records at random places (before and after the kill)."""
    out = list(good)
    rng = random.Random(seed)
    for value in bad:
        out.insert(rng.randrange(len(out) + 1), value)
    return out


def _lines() -> list[bytes]:
    lines = [line.encode() for line in corpus.lines(36_000, seed=21)]
    return _spread(lines, [NOT_UTF8] * 5, seed=1)


def _orders() -> list[bytes]:
    rng = random.Random(7)
    orders = [
        {
            "user": f"u{rng.randrange(40)}",
            "amount": rng.randrange(1, 200),
            "status": rng.choice(["paid", "paid", "open", "refunded"]),
        }
        for _ in range(3000)
    ]
    bad = (
        [NOT_JSON] * 7
        + [b"[1, 2]", b'"order"', b"null"]  # JSON, not an object: the filter's .get() raises
        + [b'{"amount": 5, "status": "paid"}'] * 4  # no user: the key_by raises
        + [b'{"user": "u1", "status": "paid"}'] * 5  # no amount: the map after the shuffle
        + [b'{"user": "u2", "amount": "12", "status": "paid"}'] * 4  # sum() takes numbers
    )
    return _spread([json.dumps(o).encode() for o in orders], bad, seed=2)


def _readings() -> list[bytes]:
    rng = random.Random(9)
    # Quarters add up exactly in any order: the average does not depend on the grouping.
    readings = [
        {"sensor": f"s{rng.randrange(20)}", "value": rng.randrange(-200, 400) / 4}
        for _ in range(3000)
    ]
    bad = (
        [NOT_JSON] * 6
        + [b'{"sensor": "s3", "value": "hot"}'] * 4  # add() raises, in the pre-aggregation
        + [b'{"value": 1.5}'] * 3  # no sensor: the key_by raises
    )
    return _spread([json.dumps(r).encode() for r in readings], bad, seed=3)


@dataclass(frozen=True)
class Example:
    topics: dict[str, str]  # build()'s parameters -> topic names
    source: str  # the parameter of the source topic
    values: Callable[[], list[bytes]]
    dead: dict[str, int]  # kind of error -> records the reference finds dead
    increasing: tuple[str, ...] = ()  # changelogs of counts and positive sums


EXAMPLE_RUNS = {
    "wordcount": Example(
        {"lines": "lines", "counts": "word-counts"},
        "lines",
        _lines,
        {"not UTF-8": 5},
        increasing=("counts",),
    ),
    "two_shuffles": Example(
        {
            "lines": "lines",
            "counts": "word-counts",
            "new_words": "new-words",
            "per_letter": "distinct-words-per-letter",
        },
        "lines",
        _lines,
        {"not UTF-8": 5},
        increasing=("counts", "per_letter"),
    ),
    "revenue": Example(
        {"orders": "orders", "revenue": "revenue"},
        "orders",
        _orders,
        {"not JSON": 7, "AttributeError": 3, "KeyError": 9, "not a number": 4},
        increasing=("revenue",),
    ),
    "sensor_average": Example(
        {"readings": "readings", "averages": "sensor-averages"},
        "readings",
        _readings,
        {"not JSON": 6, "TypeError": 4, "KeyError": 3},
    ),
}


@pytest.mark.parametrize("name", list(EXAMPLE_RUNS))
def test_example_with_a_worker_killed_mid_stream_is_exactly_once(
    name: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    example = EXAMPLE_RUNS[name]
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        EXAMPLES / f"{name}.py",
        example.topics,
        shuffle_partitions="2",
        expected_workers="2",
    )
    try:
        run.start(workers=2)
        run.feed_topic(example.source, example.values(), seconds=4)
        run.kill_mid_stream(1)
        run.drain(timeout=120)
        expected = run.verify()
        assert Counter(error.partition(":")[0] for _, error in expected.dead) == example.dead
        for param in example.increasing:
            for records in read_committed(kafka_bootstrap, run.topics[param]).values():
                updates: dict[bytes | None, list[float]] = {}
                for key, value, _ in records:
                    updates.setdefault(key, []).append(json.loads(value or b""))
                for key, values in updates.items():
                    assert values == sorted(set(values)), f"{param} {key!r}: {values[:10]}"
    finally:
        run.stop()


# An event to send: (build()'s topic parameter, the record, its Kafka timestamp or None).
_Event = tuple[str, dict[str, Any], int | None]


@dataclass(frozen=True)
class TimedExample:
    """An event-time example: its topics, its input from an event time ``t0`` in the order
    to send it (no record is behind its partition's watermark, so none can be late), and
    records at an event time ``end`` that close every window and join of that input."""

    topics: dict[str, str]
    events: Callable[[int], list[_Event]]
    closing: Callable[[int], list[_Event]]


def _clicks_events(t0: int) -> list[_Event]:
    _, _, order = timecheck.stream(t0, 3000, seed=11)
    return [
        ("views", dict(e), e["at"]) if "at" in e else ("clicks", dict(e), None)  # type: ignore[typeddict-item]
        for e in order
    ]


def _clicks_closing(end: int) -> list[_Event]:
    click, view = timecheck.closing(end)
    return [("clicks", json.loads(click), None), ("views", json.loads(view), end)]


def _promotions_events(t0: int) -> list[_Event]:
    _, _, order = chaincheck.stream(t0, 3000, seed=12)
    return [("promotions" if e["id"][0] == "p" else "clicks", dict(e), None) for e in order]


def _promotions_closing(end: int) -> list[_Event]:
    # Pages of their own: the closing click's second and promotion never pair.
    return [
        ("clicks", {"id": "close", "page": "closing/clicks", "ts": end}, None),
        ("promotions", {"id": "close", "page": "closing/promotions", "ts": end}, None),
    ]


TIMED_RUNS = {
    "clicks": TimedExample(
        {"clicks": "clicks", "views": "views", **timecheck.SINKS}, _clicks_events, _clicks_closing
    ),
    "promotions": TimedExample(
        {"clicks": "clicks", "promotions": "promotions", **chaincheck.SINKS},
        _promotions_events,
        _promotions_closing,
    ),
}
PARTITIONS = 2  # of each source topic


@pytest.mark.parametrize("name", list(TIMED_RUNS))
def test_timed_example_with_a_worker_killed_mid_stream_is_what_the_harness_gives(
    name: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Windows, sessions, joins and chained timed stages: every sink's committed records are
    exactly, as a multiset, what processor.testing gives for the same input, and nothing is
    late or dead."""
    example = TIMED_RUNS[name]
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        EXAMPLES / f"{name}.py",
        example.topics,
        source_partitions=PARTITIONS,
        interval_ms=400,
        shuffle_partitions="2",
    )
    # Recent: the broker refuses Kafka timestamps far from now (views carry theirs).
    t0 = (int(time.time() * 1000) // 60_000 - 30) * 60_000
    events = example.events(t0)
    end = max(e["ts"] if "ts" in e else e["at"] for _, e, _ in events) + 3 * 60_000
    driver = Driver(run.pipeline, partitions=2, source_partitions=PARTITIONS, checkpoint_every=200)
    for param, event, timestamp in events:
        driver.send(run.topics[param], event, timestamp=timestamp)
    driver.finish()
    expected = {topic: Counter(driver.raw_output(topic)) for topic in driver.plan.sink_topics}
    assert all(expected.values()), "the harness gives nothing for a sink"

    sent: Counter[str] = Counter()

    def send(chunk: list[_Event]) -> None:
        placed = []
        for param, event, timestamp in chunk:
            topic = run.topics[param]
            placed.append((topic, json.dumps(event).encode(), sent[topic] % PARTITIONS, timestamp))
            sent[topic] += 1
        run.send_placed(placed)

    # Fed from before the job starts and without a pause: a partition the job found empty
    # for its source's idle_ms would be idle when its records come, and some of them late.
    run.feed_values(events, 20, send)
    run.start_coordinator(exit_when_idle=False)
    run.start_worker(0)
    run.start_worker(1)
    try:
        wait_until(run._sources_committed, 60, "committed positions in every source partition")
        run.kill_worker(1)
        run.start_worker(1)
        assert run._feeder is not None
        run._feeder.join(120)
        assert not run._feeder.is_alive()
        run.send_placed(
            (run.topics[param], json.dumps(event).encode(), p, timestamp)
            for param, event, timestamp in example.closing(end)
            for p in range(PARTITIONS)
        )
        late_topic = f"{run.job}.late"

        def done() -> bool:
            if any(read_committed(kafka_bootstrap, late_topic).values()):
                return True
            return all(
                len(_records(kafka_bootstrap, topic)) >= sum(want.values())
                for topic, want in expected.items()
            )

        wait_until(done, 120, "every window and pair of the input, or a late record")
        late = read_committed(kafka_bootstrap, late_topic)
        assert not any(late.values()), f"{sum(map(len, late.values()))} records late"
        for topic, want in expected.items():
            got = Counter(_records(kafka_bootstrap, topic))
            assert got == want, (
                f"{topic}: {sorted((got - want).items())[:3]} extra, "
                f"{sorted((want - got).items())[:3]} missing"
            )
        dlq = read_committed(kafka_bootstrap, run.settings.dlq_topic)
        assert not any(dlq.values()), "dead records"
    finally:
        run.stop()


def _records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    return [(k, v or b"") for part in read_committed(bootstrap, topic).values() for k, v, _ in part]
