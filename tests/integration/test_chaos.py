"""The chaos run in its short CI mode (the long run: python -m tests.chaos).

PROCESSOR_TEST_CHAOS_PORT (default 19292) and PROCESSOR_TEST_CHAOS_S3_PORT (19392) move the
ports of the broker and the S3 server each test starts; PROCESSOR_TEST_CHAOS_CLUSTER_PORT
(19892) the 3-node cluster's (brokers P..P+2, controllers P+100..P+102).
PROCESSOR_TEST_CHAOS_KEEP=<dir> keeps a copy of each failed run there, the brokers' log dirs
with it (tests/chaos.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.broker_faults import TXN_LEADER_KILL
from tests.chaos import FALLBACK, WORKERS, run_chaos
from tests.netns import available
from tests.network_faults import BROKER_CUT, WORKER_CUT, chaos_network
from tests.workers import worker_port

CLUSTER_PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_CHAOS_CLUSTER_PORT", "19892")))

# The faults of a short run without a broker restart: every kind of process fault, once at least.
NO_BROKER_RESTART = {"worker SIGKILL", "coordinator SIGKILL", "worker SIGSTOP (zombie)"}


def test_chaos_short(tmp_path: Path) -> None:
    summary = run_chaos(tmp_path, words=600_000, faults=10, seed=7, broker_restart=True)
    report = summary.to_json()
    print(json.dumps(report))
    assert summary.faults["broker restart"] == 1
    assert sum(summary.faults.values()) == 10
    assert summary.records_verified > 0
    assert (summary.lost, summary.duplicated, summary.unknown) == (0, 0, 0), report
    assert summary.anomalies is not None and summary.anomalies.clean, report


def test_chaos_short_with_s3_storage_and_an_outage(tmp_path: Path) -> None:
    summary = run_chaos(tmp_path, words=400_000, faults=8, seed=3, broker_restart=False, s3=True)
    report = summary.to_json()
    print(json.dumps(report))
    assert summary.faults["S3 outage"] == 1
    assert summary.records_verified > 0
    assert (summary.lost, summary.duplicated, summary.unknown) == (0, 0, 0), report
    assert summary.anomalies is not None and summary.anomalies.clean, report


def test_chaos_short_on_the_two_shuffle_pipeline(tmp_path: Path) -> None:
    """Every sink of examples/two_shuffles.py exact after worker and coordinator SIGKILLs and
    a zombie (seed 4: kill, kill, coordinator, kill, stop)."""
    example = Path(__file__).parents[2] / "examples" / "two_shuffles.py"
    summary = run_chaos(
        tmp_path,
        words=60_000,
        faults=5,
        seed=4,
        broker_restart=False,
        pipeline=f"{example}:pipeline",
    )
    report = summary.to_json()
    print(json.dumps(report))
    assert set(summary.faults) == NO_BROKER_RESTART
    assert set(summary.sinks) == {"word-counts", "new-words", "distinct-words-per-letter"}
    assert all(check.records > 0 for check in summary.sinks.values()), report
    assert summary.exact, report


def test_chaos_short_with_fallbacks_after_an_aggregation(tmp_path: Path) -> None:
    """tests/integration/milestones_pipeline.py, a process after a count in one stage, exact
    after worker and coordinator faults and two fallback restores (a keyed task's committed
    snapshot lost, every worker SIGKILLed): the replay hands the count's updates on to the
    process, which emits no milestone twice."""
    summary = run_chaos(
        tmp_path,
        words=150_000,
        faults=5,
        seed=5,
        broker_restart=False,
        pipeline=f"{Path(__file__).parent / 'milestones_pipeline.py'}:pipeline",
        fallbacks=True,
    )
    report = summary.to_json()
    print(json.dumps(report))
    assert summary.faults[FALLBACK] == 2
    logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
    assert "replay after the fallback is done" in logs, "no restore fell back"
    assert set(summary.sinks) == {"word-counts", "word-milestones"}
    assert all(check.records > 0 for check in summary.sinks.values()), report
    assert summary.exact, report


def test_chaos_short_on_event_time_windows_and_a_join(tmp_path: Path) -> None:
    """examples/clicks.py's windows and join exact after worker and coordinator SIGKILLs and a
    zombie while both sources are fed (seed 4: kill, kill, coordinator, kill, stop), nothing
    late."""
    summary = run_chaos(tmp_path, words=0, faults=5, seed=4, broker_restart=False, clicks=6000)
    report = summary.to_json()
    print(json.dumps(report))
    assert set(summary.faults) == NO_BROKER_RESTART
    assert set(summary.sinks) == {
        "clicks-per-page-minute",
        "clicks-per-page-hopping",
        "click-sessions",
        "view-clicks",
    }
    assert all(check.records > 0 for check in summary.sinks.values()), report
    assert summary.exact, report


def test_chaos_short_on_chained_timed_stages_with_poison_records(tmp_path: Path) -> None:
    """examples/promotions.py (a window with lateness feeding a window and a join) exact after
    worker and coordinator SIGKILLs and a zombie while both sources are fed, with poison
    records among the clicks and the sources' idle_ms (2 s) shorter than the pauses (seed 4:
    kill 3.9 s, kill 2.6 s, coordinator, kill 4.3 s, stop 5.5 s): nothing late, the DLQ holds
    each poison record once."""
    summary = run_chaos(tmp_path, words=0, faults=5, seed=4, broker_restart=False, chained=6000)
    report = summary.to_json()
    print(json.dumps(report))
    assert set(summary.faults) == NO_BROKER_RESTART
    assert set(summary.sinks) == {
        "clicks-per-page-second",
        "clicks-per-site-10s",
        "promotion-clicks",
    }
    assert all(check.records > 0 for check in summary.sinks.values()), report
    assert summary.dead == 11, report  # one set of poison records (tests/integration/poison.py)
    assert summary.exact, report


def test_chaos_short_on_three_brokers(tmp_path: Path) -> None:
    """On a 3-node cluster (3 copies, min ISR 2), every broker and worker in a network
    namespace of its own: the broker that leads a task's transaction coordinator partition
    SIGKILLed (its partitions must get other leaders) and restarted, a worker cut off from
    the network (a zombie: its tasks must move, it must be fenced once healed) and the
    busiest broker cut off (its leaderships must move), besides worker and coordinator
    faults; the output exact."""
    missing = available()
    if missing:
        pytest.skip(f"no network namespaces here: {missing}")
    kinds = [TXN_LEADER_KILL, WORKER_CUT, BROKER_CUT]
    with chaos_network(3, WORKERS) as network:
        summary = run_chaos(
            tmp_path,
            words=200_000,
            faults=10,  # 3 of them (30 %) the cluster's
            seed=2,
            broker_restart=False,
            port=CLUSTER_PORT,
            brokers=3,
            broker_kinds=kinds,
            network=network,
        )
    report = summary.to_json()
    print(json.dumps(report))
    assert {kind: summary.faults[kind] for kind in kinds} == dict.fromkeys(kinds, 1), report
    assert "broker restart" not in summary.faults, report
    # Leadership left the killed and the cut-off broker, the transactional id was in the
    # killed one's partition, and the cut-off worker's tasks were assigned elsewhere.
    assert summary.missed == 0, report
    assert summary.records_verified > 0
    assert summary.exact, report
