"""The Flink SQL peer's Nexmark queries (bench/flink/nexmark/*.sql) on the session's broker:
each one's committed output equals its definition over the same events (tests/nexmark_data.py),
as the engine's does (tests/unit/test_nexmark.py). One query of each kind: pass-through (q0),
updating, by the last value per key (q4), windows with ties (q5). Skipped when the Flink jar
cannot be built (no mvn, or Maven Central out of reach).

bench/nexmark_check.py runs all nine: ``python bench/nexmark_check.py --port P``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bench.nexmark_check import check
from bench.peers.flink_nexmark_peer import FlinkNexmarkPeer
from tests import nexmark_data as nexmark

QUERIES = ["q0", "q4", "q5"]


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_flink_sql_queries_equal_their_definitions(kafka_bootstrap: str, tmp_path: Path) -> None:
    try:
        FlinkNexmarkPeer("q0").prepare()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"the Flink jar cannot be built: {exc}")
    stream = nexmark.events(1500, seed=42)
    topic = f"nexmark-{uuid.uuid4().hex[:8]}"
    results = check(kafka_bootstrap, QUERIES, stream, tmp_path, 2, 240, topic=topic)
    assert [r for r in results if not r["exact"]] == []
