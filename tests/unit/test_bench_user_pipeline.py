"""bench/user_pipeline.py's two sides compute what the input says: the pipeline (in the test
driver) and the plain confluent-kafka app's carts (with a producer that only records) both
give `carts_avro.expected`'s output, and the sitting's summary calls a tie a tie."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.peers.plain_carts_app import Carts
from bench.pipelines import carts_avro
from bench.user_pipeline import summarize
from processor.testing import Driver


def _in_turn(partitions: list[list[carts_avro.Record]]) -> list[carts_avro.Record]:
    """The partitions' records interleaved, each partition's in its order."""
    longest = max(len(p) for p in partitions)
    return [p[i] for i in range(longest) for p in partitions if i < len(p)]


def test_the_input_is_sessions_never_late_and_closed_per_partition() -> None:
    partitions = carts_avro.generate(2000, 4)
    assert sum(len(p) for p in partitions) >= 2000 + 4
    for records in partitions:
        highest = -(2**62)
        for _, _, raw, _, ts in records:
            assert json.loads(raw)["ts"] == ts
            assert ts > highest - carts_avro.OUT_OF_ORDERNESS_MS  # never late
            highest = max(highest, ts)
        assert records[-1][1].startswith(b"closing-")
    kinds = {json.loads(r[2])["type"] for p in partitions for r in p}
    assert kinds == {"add", "view", "checkout"}


@pytest.mark.parametrize("variant", carts_avro.WHOLE)
def test_the_pipeline_gives_the_expected_output(variant: str) -> None:
    partitions = carts_avro.generate(3000, 4)
    want = carts_avro.expected(partitions, variant)
    assert {row[1][1] for row in want} == {"add", "checkout", "abandoned"}
    driver = Driver(carts_avro.build("in", "out", variant), 4, 4, 500)
    for _, key, value, source, ts in _in_turn(partitions):
        heads = [("source", source)] if source else None
        driver.send("in", value, key=key, timestamp=ts, headers=heads)
    driver.finish()
    records = [
        (key, value, dict(heads))
        for (key, value), heads in zip(driver.raw_output("out"), driver.headers("out"), strict=True)
    ]
    assert carts_avro.rows_of(iter(records)) == want
    assert not driver.dead_records()


class _Recorder:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None, dict[str, bytes]]] = []

    def produce(self, _topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        self.records.append((key, value, dict(kwargs["headers"] or [])))

    def poll(self, _timeout: float) -> int:
        return 0


def test_the_plain_apps_carts_give_the_expected_output() -> None:
    partitions = carts_avro.generate(3000, 4)
    producer = _Recorder()
    for records in partitions:  # one app per partition, in batches of 50
        carts = Carts(producer, "out")  # type: ignore[arg-type]
        highest = -(2**62)
        for start in range(0, len(records), 50):
            for _, key, raw, source, ts in records[start : start + 50]:
                carts.on_record(key.decode(), json.loads(raw), ts, source)
                highest = max(highest, ts)
            carts.fire(highest - carts_avro.OUT_OF_ORDERNESS_MS)
    assert carts_avro.rows_of(iter(producer.records)) == carts_avro.expected(partitions)


def test_the_summary_calls_overlapping_ranges_a_tie() -> None:
    def run(engine: str, rate: int) -> dict[str, Any]:
        return {
            "engine": engine,
            "exact": True,
            "events_per_s": rate,
            "job_cpu_s_per_m_events": 1.0,
            "broker_cpu_s_per_m_events": 1.0,
        }

    runs = [run("processor", r) for r in (90, 100, 110)] + [run("plain", r) for r in (105, 200)]
    summary = summarize([*runs, {"engine": "plain", "exact": False}])
    assert summary["processor"]["events_per_s"] == {"median": 100, "min": 90, "max": 110}
    assert summary["plain"]["exact_runs"] == 2
    assert summary["ratio"] == round(100 / 152.5, 2)
    assert summary["ranges_overlap"] is True
    partitioned = summarize([*runs, run("processor-partitioned", 300)])
    assert partitioned["ratio_partitioned"] == round(300 / 152.5, 2)
    assert partitioned["ranges_overlap_partitioned"] is False


def test_the_variants_write_each_add_as_it_is() -> None:
    partitions = carts_avro.generate(1000, 2)
    want = carts_avro.expected(partitions, "shuffled")
    adds = sum(json.loads(r[2])["type"] == "add" for p in partitions for r in p)
    assert sum(want.values()) == adds
    for variant in ("shuffled", "stateless"):
        driver = Driver(carts_avro.build("in", "out", variant), 2, 2, 300)
        for _, key, value, source, ts in _in_turn(partitions):
            driver.send("in", value, key=key, timestamp=ts, headers=[("source", source)])
        driver.finish()
        pairs = zip(driver.raw_output("out"), driver.headers("out"), strict=True)
        records = [(key, value, dict(heads)) for (key, value), heads in pairs]
        assert carts_avro.rows_of(iter(records)) == want, variant
