"""Every example of examples/ run by the engine (a coordinator and two workers as processes),
one worker SIGKILLed mid-stream and replaced: the committed output, read back by a reader of
its own, is exactly what the reference run computes from the same input, and the DLQ holds
exactly the records the reference finds dead."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from processor.commands import corpus
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
