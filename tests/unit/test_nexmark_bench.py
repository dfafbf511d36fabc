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
