"""The pure parts of bench/nexmark.py: the definitions streamed (bench/nexmark_expect.py)
give what tests/nexmark_data.py's give; `Rows` compares multisets; the summary and the
markdown table of a results file (bench/nexmark_table.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.nexmark_expect import Expected
from bench.nexmark_output import Rows, compare_rows, expected
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
