"""The pure parts of bench/nexmark.py: the definitions streamed (bench/nexmark_expect.py)
give what tests/nexmark_data.py's give; `Rows` compares multisets; the summary and the
markdown table of a results file (bench/nexmark_table.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.nexmark_expect import Expected
from bench.nexmark_output import Rows, compare_rows, expected
from bench.nexmark_table import markdown, summarize
from tests import nexmark_data as nexmark

QUERIES = [f"q{n}" for n in range(9)]


@pytest.mark.parametrize("seed", [1, 42])
def test_the_streamed_definitions_equal_the_direct_ones(seed: int) -> None:
    stream = nexmark.events(4000, seed=seed)
    streamed = Expected(QUERIES)
    for event in stream:
        streamed.add(event)
    for query in QUERIES:
        want = expected(query, stream)
        rows = streamed.rows(query)
        assert rows.rows == want, query
        assert rows.count == sum(want.values()) > 0, query


def test_rows_compare_by_digest_beyond_their_detail() -> None:
    small, large, other = Rows(detail=2), Rows(detail=2), Rows(detail=2)
    for row in ("a", "b", "b", "c"):
        small.add(row)
    for row in ("b", "c", "a", "b"):
        large.add(row)
    for row in ("b", "c", "a", "a"):
        other.add(row)
    assert small.rows is None
    assert compare_rows(small, large)["exact"]
    assert compare_rows(small, large)["by"] == "count and digest"
    assert not compare_rows(small, other)["exact"]
    kept, kept_too = Rows(), Rows()
    kept.add("a")
    kept_too.add("b")
    result: dict[str, Any] = compare_rows(kept, kept_too)
    assert not result["exact"] and result["missing"] == 1 and result["extra"] == 1


def _run(query: str, engine: str, rate: int | None, exact: bool = True) -> dict[str, Any]:
    return {
        "query": query,
        "engine": engine,
        "exact": exact,
        "events_per_s": rate,
        "job_cpu_s_per_m_events": 10.0,
        "broker_cpu_s_per_m_events": 2.0,
        "output_records_per_m_events": 5.0,
        "load_1m": 1.0,
    }


def test_the_summary_counts_exact_runs_and_calls_overlapping_ranges_a_tie() -> None:
    runs = [
        _run("q1", "processor", 100),
        _run("q1", "processor", 120),
        _run("q1", "processor", 500, exact=False),  # does not count
        _run("q1", "flink", 110),
        _run("q1", "flink", 130),
        _run("q2", "processor", 300),
        _run("q2", "flink", 100),
        _run("q2", "flink", 150),
    ]
    report = {
        "queries": ["q1", "q2"],
        "engines": ["processor", "flink"],
        "runs": runs,
        "events": 1000,
        "partitions": 4,
        "timestamp": "x",
        "runs_requested": 2,
    }
    summary = summarize(report)
    ours = summary["results"]["q1"]["processor"]
    assert (ours["exact_runs"], ours["all_exact"]) == (2, False)
    assert (ours["events_per_s_median"], ours["events_per_s_max"]) == (110, 120)
    assert summary["comparison"]["q1"] == {"ratio": 0.917, "verdict": "tie"}
    assert summary["comparison"]["q2"] == {"ratio": 2.4, "verdict": "win"}
    assert summary["geomean_ratio"] == round((110 / 120 * 300 / 125) ** 0.5, 3)
    table = markdown(report)
    assert "| q1 | 110 [100-120] (2 of 3 exact) | 120 [110-130] | 0.92x | tie |" in table
    assert "| q2 | 300 [300-300] | 125 [100-150] | 2.40x | win |" in table


def test_a_processor_run_is_done_when_its_last_output_and_input_are_committed() -> None:
    from bench.nexmark_done import done_at

    checkpoints = [
        {"id": 1, "triggered_at": 10.0, "completed_at": 10.2, "records_in": 5},
        {"id": 2, "triggered_at": 11.0, "completed_at": 11.3, "records_in": 3},
        {"id": 3, "triggered_at": 12.0, "completed_at": 12.1, "records_in": 0},
        {"id": 4, "triggered_at": 13.0, "completed_at": 13.1, "records_in": 0},
    ]
    # The last output, written in checkpoint 2's epoch, is seen when checkpoint 2 completes.
    assert done_at(checkpoints, 10.5) == 11.3
    # Written after checkpoint 2's trigger: committed by checkpoint 3 at the latest.
    assert done_at(checkpoints, 11.5) == 12.1
    # Input counted after the last output: the input's checkpoint is later.
    assert done_at(checkpoints, 9.0) == 11.3
    # No output at all: the last input's checkpoint; an output no checkpoint followed: unknown.
    assert done_at(checkpoints, None) == 11.3
    assert done_at(checkpoints, 13.5) is None
