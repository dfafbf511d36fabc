"""bench/nexmark.py end to end on a tiny count: its own broker (port 20292 and 20293, moved
into this pytest-xdist worker's block: tests/workers.py), the crate's events, both engines on
an updating query (q4) and a window query (q5), the engine going first alternating; exit 0
(every run exact) and a results file with every figure the contract names. No timing
assertions. Skipped without the crate's binary or when the Flink jar cannot be built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import nexmark
from bench.nexmark_table import markdown
from bench.peers.flink_nexmark_peer import FlinkNexmarkPeer
from processor.commands import nexmark as generate
from tests.workers import worker_port

# The harness's own broker and controller (PROCESSOR_TEST_KAFKA_PORT + 6 collided with the
# second worker's session broker): a block of its own, tests/unit/test_workers.py BLOCKS.
NEXMARK_BENCH_PORT = 20292

FIGURES = (
    "events_per_s",
    "seconds",
    "job_cpu_s_per_m_events",
    "broker_cpu_s_per_m_events",
    "output_records_per_m_events",
    "load_1m",
)


@pytest.mark.integration
@pytest.mark.server
@pytest.mark.timeout(900)
def test_a_tiny_sitting_is_exact_and_complete(tmp_path: Path) -> None:
    try:
        generate.find_binary()
        FlinkNexmarkPeer("q0").prepare()
    except (generate.NexmarkError, RuntimeError, OSError) as exc:
        pytest.skip(f"no crate binary or Flink jar: {exc}")
    args = ["--events", "5000", "--runs", "1", "--queries", "q4,q5", "--partitions", "2"]
    port = worker_port(NEXMARK_BENCH_PORT)
    args += ["--port", str(port), "--results-dir", str(tmp_path), "--timeout", "300"]
    assert nexmark.main(args) == 0
    [path] = tmp_path.glob("nexmark-*.json")
    report = json.loads(path.read_text())
    assert {"nproc", "cpu_model", "mem_total_mb"} <= set(report["machine"])
    assert report["loader"]["records"] == 5000 + 2
    assert report["loader"]["load_events_per_s"] > 0
    assert report["expected"]["rows"]["q5"] > 0
    runs = report["runs"]
    assert sorted((r["query"], r["engine"]) for r in runs) == [
        ("q4", "flink"),
        ("q4", "processor"),
        ("q5", "flink"),
        ("q5", "processor"),
    ]
    assert [r["first"] for r in runs[::2]] == ["processor", "flink"]
    for run in runs:
        assert run["exact"] and run["state"] == "FINISHED", run
        assert all(run[f] is not None for f in FIGURES), run
        assert run["job_cpu_s"] > 0 and run["output_records"] >= run["rows"]
    for query in ("q4", "q5"):
        for engine in ("processor", "flink"):
            figures = report["results"][query][engine]
            assert figures["all_exact"] and figures["events_per_s_median"] > 0
        assert report["comparison"][query]["verdict"] in ("win", "tie", "loss")
    assert report["geomean_ratio"] > 0
    table = markdown(report)
    assert "| q4 |" in table and "Geometric mean" in table
