"""The shipped example pipelines load, plan as intended, and give what a direct computation
gives (their reference run; the engine runs them in the integration tests)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from processor import testing
from processor.plan.load import load_pipeline
from processor.serde.codec import sink_value
from processor.testing import FINAL_WATERMARK, Driver
from tests import chaincheck, timecheck
from tests.reference import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LINES = [
    " ".join(
        random.Random(i).choice(["Cat", "cab", "dog", "Door", "egg", "éclair"]) for _ in range(9)
    )
    for i in range(40)
]


def _encoded(values: Mapping[str, object]) -> dict[bytes | None, bytes]:
    return {k.encode(): json.dumps(v).encode() for k, v in values.items()}


def test_every_example_loads() -> None:
    names = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert {"wordcount", "clicks", "components", "carts"} <= set(names)
    for name in names:
        load_pipeline(str(EXAMPLES / f"{name}.py"))


def test_wordcount() -> None:
    pipeline, plan = load_pipeline(str(EXAMPLES / "wordcount.py"))
    assert plan.stages[1].combiner is not None
    result = run(pipeline, {"lines": [line.encode() for line in LINES]})
    words = Counter(w for line in LINES for w in re.findall(r"\w+", line.lower()))
    assert result.sinks["word-counts"].final() == _encoded(dict(words))


def test_two_shuffles() -> None:
    pipeline, plan = load_pipeline(str(EXAMPLES / "two_shuffles.py"))
    assert len(plan.stages) == 4
    result = run(pipeline, {"lines": [line.encode() for line in LINES]})
    distinct = {w for line in LINES for w in re.findall(r"\w+", line.lower())}
    assert result.sinks["new-words"].multiset() == Counter(
        (w.encode(), json.dumps(w, ensure_ascii=False).encode()) for w in distinct
    )
    assert result.sinks["distinct-words-per-letter"].final() == _encoded(
        dict(Counter(w[0] for w in distinct))
    )


def test_revenue() -> None:
    pipeline, _ = load_pipeline(str(EXAMPLES / "revenue.py"))
    rng = random.Random(5)
    orders: list[dict[str, Any]] = [
        {
            "user": rng.choice("abc"),
            "amount": rng.randrange(1, 100),
            "status": rng.choice(["paid", "open"]),
        }
        for _ in range(200)
    ]
    result = run(pipeline, {"orders": [json.dumps(o).encode() for o in orders]})
    expected: dict[str, int] = defaultdict(int)
    for order in orders:
        if order["status"] == "paid":
            expected[str(order["user"])] += int(order["amount"])
    assert result.sinks["revenue"].final() == _encoded(expected)


def test_sensor_average() -> None:
    pipeline, plan = load_pipeline(str(EXAMPLES / "sensor_average.py"))
    assert plan.stages[1].combiner is not None  # aggregate with merge: pre-aggregated
    rng = random.Random(9)
    readings: list[dict[str, Any]] = [
        {"sensor": f"s{rng.randrange(4)}", "value": rng.randrange(-50, 50)} for _ in range(300)
    ]
    result = run(pipeline, {"readings": [json.dumps(r).encode() for r in readings]})
    values: dict[str, list[int]] = defaultdict(list)
    for reading in readings:
        values[str(reading["sensor"])].append(int(reading["value"]))
    assert result.sinks["sensor-averages"].final() == _encoded(
        {s: round(sum(v) / len(v), 6) for s, v in values.items()}
    )


def _harness_records(output: list[tuple[Any, Any]]) -> Counter[tuple[bytes, bytes]]:
    """`processor.testing.run`'s records of a sink, encoded back as the sink wrote them."""
    return Counter((str(k).encode(), sink_value(v)) for k, v in output)


@pytest.mark.parametrize(("partitions", "every"), [(1, 1000), (3, 37)])
def test_clicks_windows_and_join_through_the_harness(partitions: int, every: int) -> None:
    """examples/clicks.py on the engine's stage code (processor.testing) gives every window
    and pair that tests/timecheck.py computes directly, whatever the partitions and the
    checkpoints, and nothing late."""
    pipeline, _ = load_pipeline(str(EXAMPLES / "clicks.py"))
    views, clicks, order = timecheck.stream(1_700_000_000_000, 3000, seed=2)
    driver = Driver(pipeline, partitions, partitions, every)
    for event in order:  # in event-time order, as the chaos run sends them
        if "at" in event:
            driver.send("views", event, timestamp=event["at"])  # type: ignore[typeddict-item]
        else:
            driver.send("clicks", event)
    driver.finish()
    expected = timecheck.windows(clicks, watermark=FINAL_WATERMARK)
    for name, want in expected.items():
        assert _harness_records(driver.output(timecheck.SINKS[name])) == want, name
    assert sum(expected["sessions"].values()) > len(timecheck.PAGES) * 2
    want_pairs = timecheck.pairs(views, clicks)
    assert _harness_records(driver.output(timecheck.SINKS["view_clicks"])) == want_pairs
    assert driver.late_records() == [] and driver.dead_records() == []


def test_promotions_chained_windows_and_join_through_run() -> None:
    """examples/promotions.py by `processor.testing.run` (its topics' records in turn, not in
    event-time order): exactly what tests/chaincheck.py computes directly."""
    pipeline, _ = load_pipeline(str(EXAMPLES / "promotions.py"))
    clicks, promotions, _ = chaincheck.stream(1_700_000_000_000, 3000, seed=5)
    inputs = {"clicks": clicks, "promotions": promotions}
    got = testing.run(pipeline, inputs, checkpoint_every=50)
    for name, want in chaincheck.expected(clicks, promotions).items():
        assert _harness_records(got[chaincheck.SINKS[name]]) == want, name
