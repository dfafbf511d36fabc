"""The pure parts of the Nexmark live phase (bench/nexmark_live.py): where the replayer puts
each line (bench/nexmark_replay.py), when the broker acknowledged it, which input an output
row depends on and its latency (bench/nexmark_latency.py), the live summary and table
(bench/nexmark_table.py)."""

from __future__ import annotations

import json
from typing import Any

from bench.nexmark_expect import Expected
from bench.nexmark_latency import SAMPLE_MS, Dependencies, latencies, sampled
from bench.nexmark_replay import AckLog, lines, placement
from bench.nexmark_table import live_markdown, summarize_live
from tests import nexmark_data as nexmark


def test_blocks_of_lines_go_round_robin_and_each_partition_keeps_their_order() -> None:
    places = [placement(i, 3, block=2) for i in range(12)]
    assert [p for p, _ in places] == [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]
    assert [o for _, o in places] == [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]
    # Every partition's offsets are 0, 1, 2, ... in the order of the lines.
    for partition in range(3):
        offsets = [o for p, o in (placement(i, 3, 256) for i in range(5000)) if p == partition]
        assert offsets == list(range(len(offsets)))


def test_the_ack_log_gives_each_offset_its_change_points_time() -> None:
    acks = AckLog.parse("0 0 1000\n0 5 1500\n1 0 2000\n0 9 1700\n")
    assert acks.at(0, 0) == 1.0 and acks.at(0, 4) == 1.0
    assert acks.at(0, 5) == 1.5 and acks.at(0, 8) == 1.5
    assert acks.at(0, 9) == 1.7 and acks.at(0, 100) == 1.7
    assert acks.at(1, 3) == 2.0
    assert acks.at(2, 0) is None


def test_the_file_is_read_as_the_replayer_counts_its_lines(tmp_path: Any) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":1}\n\n{"b":2}\r\n{"c":3}\n')
    assert list(lines(path, 2)) == [b'{"a":1}', b'{"b":2}']
    assert list(lines(path, 10)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert list(lines(path, 0)) == []


def _fed(query: str, stream: list[nexmark.Event], partitions: int, block: int) -> Dependencies:
    deps = Dependencies(query, partitions, block)
    expected = Expected([query])
    expected.on_row = deps.row
    for index, event in enumerate(stream):
        deps.event(index, event)
        expected.add(event)
    return deps


def _every_offset_acked(stream: list[nexmark.Event], partitions: int, block: int) -> AckLog:
    """Record (p, o) acknowledged at 1000 + 100 p + o / 1000 s."""
    points: dict[int, list[tuple[int, float]]] = {}
    for index in range(len(stream)):
        p, o = placement(index, partitions, block)
        points.setdefault(p, []).append((o, 1000 + 100 * p + o / 1000))
    return AckLog(points)


def test_a_bids_row_depends_on_that_bid_whatever_the_engines_json() -> None:
    stream = nexmark.events(3000, seed=3)
    deps = _fed("q1", stream, partitions=2, block=4)
    acks = _every_offset_acked(stream, 2, 4)
    checked = skipped = 0
    for index, event in enumerate(stream):
        bid = event.get("Bid")
        if bid is None:
            continue
        row = {
            "price": 0.908 * bid["price"],  # another key order, spaces: another engine's JSON
            "date_time": bid["date_time"],
            "bidder": bid["bidder"],
            "auction": bid["auction"],
        }
        value = json.dumps(row).encode()
        if not sampled("q1", value):
            assert bid["date_time"] % SAMPLE_MS
            skipped += 1
            continue
        p, o = placement(index, 2, 4)
        assert deps.depends_on(value, acks) == 1000 + 100 * p + o / 1000
        checked += 1
    assert checked > 10 and skipped > checked


def test_a_windows_row_depends_on_the_latest_partitions_first_event_past_its_close() -> None:
    stream = nexmark.events(6000, seed=5)
    partitions, block = 3, 8
    deps = _fed("q5", stream, partitions, block)
    acks = _every_offset_acked(stream, partitions, block)
    times = [int(next(iter(e.values()))["date_time"]) for e in stream]
    end = (times[len(times) // 2] // 2000) * 2000
    firsts: dict[int, int] = {}
    for index, at in enumerate(times):
        p, _ = placement(index, partitions, block)
        if at >= end + 1000 and p not in firsts:
            firsts[p] = index
    want = max(acks.at(*placement(i, partitions, block)) or 0 for i in firsts.values())
    row = {"auction": 7, "count": 3, "window_start": end - 10_000, "window_end": end}
    assert deps.depends_on(json.dumps(row).encode(), acks) == want
    # A window that only the closing events close depends on nothing sent.
    last = max(times)
    late = {"auction": 7, "count": 3, "window_start": last, "window_end": last + 2000}
    assert deps.depends_on(json.dumps(late).encode(), acks) is None


def test_latency_counts_the_rows_whose_input_came_in_the_measured_window() -> None:
    stream = nexmark.events(2000, seed=7)
    deps = _fed("q2", stream, partitions=1, block=4)
    acks = _every_offset_acked(stream, 1, 4)
    kept = []
    for index, event in enumerate(stream):
        bid = event.get("Bid")
        if bid is not None and bid["auction"] % 123 == 0:
            value = json.dumps({"auction": bid["auction"], "price": bid["price"]}).encode()
            kept.append((1000 + index / 1000 + 0.25, value))  # each visible 250 ms after
    assert kept
    result = latencies(kept, deps, acks, 1000.0, 1003.0)
    assert result["rows_measured"] == len(kept) and result["rows_without_dependency"] == 0
    assert result["p50_ms"] == result["p99_ms"] == 250.0
    none = latencies(kept, deps, acks, 2000.0, 2001.0)
    assert none["rows_measured"] == 0 and none["p50_ms"] is None


def _cap(engine: str, capacity: int | None, exact: bool = True) -> dict[str, Any]:
    return {
        "kind": "cap",
        "query": "q1",
        "engine": engine,
        "exact": exact,
        "capacity_events_per_s": capacity,
        "at_capacity": {"job_cpu_s_per_m_events": 5.0},
    }


def _lat(engine: str, p50: float, p99: float) -> dict[str, Any]:
    return {
        "kind": "lat",
        "query": "q1",
        "engine": engine,
        "exact": True,
        "rate": 10_000,
        "latency": {"p50_ms": p50, "p99_ms": p99},
    }


def test_the_live_summary_and_its_table() -> None:
    runs = [
        _cap("processor", 40_000),
        _cap("processor", 50_000),
        _cap("processor", 90_000, exact=False),  # does not count
        _cap("flink", 20_000),
        _cap("flink", 24_000),
        _lat("processor", 600, 1100),
        _lat("processor", 700, 1300),
        _lat("processor", 650, 1200),
        _lat("flink", 900, 1500),
    ]
    report = {
        "phase": "live",
        "queries": ["q1"],
        "engines": ["processor", "flink"],
        "runs": runs,
        "events": 1000,
        "partitions": 4,
        "timestamp": "t",
        "machine": {"nproc": 2},
    }
    summary = summarize_live(report)
    ours = summary["live_results"]["q1"]["processor"]
    assert ours["capacity_median"] == 45_000 and ours["capacity_exact_runs"] == 2
    assert ours["p50_ms_median"] == 650 and ours["p99_ms_range"] == [1100, 1300]
    assert ours["latency_rate"] == 10_000
    assert summary["live_comparison"]["q1"] == {"ratio": 2.045, "verdict": "win"}
    table = live_markdown(report)
    assert "| q1 | 45,000 [40,000-50,000] (2 of 3 exact) | 22,000 [20,000-24,000]" in table
    assert "650 [600-700] / 1,200 [1,100-1,300] (3 of 3 runs)" in table
    assert "Geometric mean of the capacity ratios" in table
