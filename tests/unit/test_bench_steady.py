"""bench/harness/steady.py's pure parts: the slope, offsets to words, the lag verdict, the work
summary. The phase itself runs end to end in tests/integration/test_bench.py."""

from __future__ import annotations

import pytest

from bench.harness.measure import slope
from bench.harness.steady import InputCorpus, keeps_up, spread, topic_kind, work_summary


def test_slope_is_the_least_squares_rate() -> None:
    assert slope([(0.0, 0.0), (1.0, 10.0), (2.0, 20.0)]) == pytest.approx(10.0)
    # A staircase (progress committed every other sample) still gives the mean rate.
    stairs = [(float(t), float(10 * (t - t % 2))) for t in range(0, 61)]
    assert slope(stairs) == pytest.approx(10.0, rel=0.01)
    assert slope([(1.0, 5.0)]) is None
    assert slope([(1.0, 5.0), (1.0, 6.0)]) is None


def test_words_at_sums_the_prefixes_of_each_partition() -> None:
    corpus = InputCorpus("t", 2)
    for p, sizes in enumerate([[3, 4, 5], [10, 20]]):
        for n in sizes:
            corpus.cumulative[p].append(corpus.cumulative[p][-1] + n)
    assert corpus.lines == 5
    assert corpus.words == 42
    assert corpus.words_at({0: 0, 1: 0}) == 0
    assert corpus.words_at({0: 2, 1: 1}) == 3 + 4 + 10
    # Past the end (markers after the last record) counts the whole partition.
    assert corpus.words_at({0: 9, 1: 9}) == 42


def test_keeps_up_judges_the_growth_of_the_internal_lag() -> None:
    start = {"lag": 100, "end_offsets": 1_000, "partitions": 4}
    assert keeps_up(start, {"lag": 150, "end_offsets": 2_000, "partitions": 4})["kept_up"]
    behind = keeps_up(start, {"lag": 900, "end_offsets": 2_000, "partitions": 4})
    assert behind["judged"] and not behind["kept_up"]
    assert keeps_up({}, {}) == {"judged": False}
    assert keeps_up(start, {"lag": 0, "end_offsets": 0, "partitions": 0}) == {"judged": False}


def test_topic_kinds_and_work_per_million_words() -> None:
    assert topic_kind("job.shuffle", "out") == "shuffle"
    assert topic_kind("app-words-repartition", "out") == "shuffle"
    assert topic_kind("repartition__group--x", "out") == "shuffle"
    assert topic_kind("app-counts-changelog", "out") == "changelog"
    # Quix's changelog of the store behind its repartition topic mentions both.
    assert topic_kind("changelog__group--repartition__group--x--count--default", "o") == (
        "changelog"
    )
    assert topic_kind("out", "out") == "output"
    assert topic_kind("job.control", "out") == "other"
    footprint = {
        "job.shuffle": {"offsets": 20, "bytes": 2_000},
        "out": {"offsets": 6_000, "bytes": 90_000},
        "job.control": {"offsets": 10, "bytes": 1_000},
    }
    work = work_summary(footprint, "out", 2_000_000)
    assert work["shuffle_offsets_per_m_words"] == 10
    assert work["output_bytes_per_m_words"] == 45_000
    assert work["changelog_offsets"] == 0
    assert work["bytes_written"] == 93_000


def test_spread_is_median_and_range() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"median": 2, "range": [1, 3], "n": 3}
    assert spread([]) == {"median": None, "range": None, "n": 0}
