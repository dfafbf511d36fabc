"""bench/sustainable.py's verdict on a rung and bench/harness/measure.py's latency quarters,
the pure parts of the live-rate search (the search itself needs a broker and every system: it is a
benchmark, not a test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bench.harness.measure import latency_percentiles
from bench.sustainable import find_rate, half_summary, kept_up


def _rung(**figures: object) -> dict[str, object]:
    base: dict[str, object] = {
        "rate_words_per_s": 100_000,
        "achieved_words_per_s": 99_800,
        "producer_max_behind_s": 0.05,
        "latency_growth": 0.004,
        "p50_ms": 950.0,
    }
    return {**base, **figures}


def test_a_steady_run_kept_up() -> None:
    assert kept_up(_rung()) == (True, "kept up")


def test_growing_latency_is_a_backlog() -> None:
    ok, why = kept_up(_rung(latency_growth=0.08))
    assert not ok and why.startswith("latency grew")


def test_a_standing_backlog_is_not_keeping_up() -> None:
    ok, why = kept_up(_rung(p50_ms=17_000.0, latency_growth=0.0))
    assert not ok and why.startswith("a standing backlog")


def test_a_producer_that_fell_behind_did_not_keep_the_rate() -> None:
    assert not kept_up(_rung(producer_max_behind_s=1.2))[0]
    assert not kept_up(_rung(achieved_words_per_s=80_000))[0]


def test_failed_or_unmeasured_runs_did_not_keep_up() -> None:
    assert kept_up(_rung(error="output not exact")) == (False, "output not exact")
    assert not kept_up(_rung(latency_growth=None))[0]


def test_latency_quarters_follow_the_order_lines_were_sent() -> None:
    lines = [f"w{i}" for i in range(8)]
    sent = [float(i) for i in range(8)]
    # Each word seen once, its line's latency growing: 0.1, 0.2, ... 0.8 s.
    seen = {f"w{i}": ([1], [i + 0.1 * (i + 1)]) for i in range(8)}
    figures = latency_percentiles(lines, sent, seen, skip_before=0.0)
    assert figures["lines"] == 8
    assert figures["p50_ms_by_quarter"] == [150.0, 350.0, 550.0, 750.0]
    assert figures["latency_growth"] == pytest.approx(0.1)


def _attempts(capacity: int) -> tuple[list[int], Callable[[int], bool]]:
    tried: list[int] = []

    def attempt(rate: int) -> bool:
        tried.append(rate)
        return rate <= capacity

    return tried, attempt


def test_the_ladder_climbs_then_bisects() -> None:
    tried, attempt = _attempts(capacity=700_000)
    assert find_rate(200_000, attempt) == (680_000, 750_000)
    assert tried == [200_000, 300_000, 450_000, 680_000, 1_020_000, 830_000, 750_000]


def test_the_ladder_goes_down_when_the_first_rung_fails() -> None:
    tried, attempt = _attempts(capacity=40_000)
    good, bad = find_rate(200_000, attempt)
    assert tried[:4] == [200_000, 133_000, 89_000, 59_000]
    assert good <= 40_000 < bad
    assert good == max(r for r in tried if r <= 40_000)


def test_nothing_kept_up_stops_at_the_lowest_rate() -> None:
    tried, attempt = _attempts(capacity=0)
    assert find_rate(5_000, attempt) == (0, 1000)
    assert tried[-1] == 1000


def test_a_half_rate_point_gives_the_median_and_range_of_its_runs() -> None:
    runs: list[dict[str, Any]] = [
        {"rate_words_per_s": 1000, "interval_ms": 100, "p50_ms": 300.0, "p99_ms": 900.0},
        {"rate_words_per_s": 1000, "interval_ms": 100, "error": "RuntimeError('x')"},
        {"rate_words_per_s": 1000, "interval_ms": 100, "p50_ms": 200.0, "p99_ms": 500.0},
        {"rate_words_per_s": 1000, "interval_ms": 100, "p50_ms": 250.0, "p99_ms": 600.0},
    ]
    point = half_summary(runs)
    assert point["runs_with_figures"] == 3
    assert (point["p50_ms"], point["p99_ms"]) == (250.0, 600.0)
    assert point["p50_ms_range"] == [200.0, 300.0]
    assert point["p99_ms_range"] == [500.0, 900.0]
    assert point["runs"] == runs


def test_a_half_rate_point_without_figures_has_no_median() -> None:
    point = half_summary([{"rate_words_per_s": 1000, "interval_ms": 100, "error": "x"}])
    assert point["runs_with_figures"] == 0
    assert "p99_ms" not in point
