"""One test per crash point: the process dies exactly there, the job recovers, output is exact."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from processor.faults import POINTS
from tests.integration.harness import JobRun, wait_until

TASK_POINTS = [
    ("barrier_aligned", "count-0"),
    ("snapshot_uploading", "count-0"),
    ("snapshot_durable", "count-0"),
    ("offsets_sent", "count-0"),
    ("offsets_sent", "split-0"),
    ("committed", "count-0"),
    ("committed", "split-0"),
]


def _died_at(run: JobRun, point: str, timeout: float = 60) -> list[int]:
    """Wait for armed workers to kill themselves at ``point``; return which did."""
    wait_until(lambda: run.dead_workers(), timeout, f"a worker to die at {point}")
    dead = run.dead_workers()
    for i in dead:
        assert run.workers[i].returncode == -signal.SIGKILL
        assert f"fault point {point} reached" in run.log(f"worker-{i}")
    return dead


def test_every_fault_point_has_a_test() -> None:
    tested = {p for p, _ in TASK_POINTS} | {"restoring", "coordinator_recorded"}
    # The PostgreSQL sink's, armed by its own kill tests.
    postgres = (Path(__file__).parent / "test_postgres_sink.py").read_text()
    tested |= {p for p in ("postgres_prepared", "postgres_committing") if f'"{p}' in postgres}
    assert tested == POINTS.keys()


@pytest.mark.parametrize(("point", "task"), TASK_POINTS)
def test_worker_killed_at_fault_point(
    point: str, task: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start_coordinator()
        # Both workers are armed: whichever runs the task dies at the point.
        for i in range(2):
            run.start_worker(i, fault=f"{point}@{task}")
        run.feed(300_000, seconds=4)
        for i in _died_at(run, point):
            run.start_worker(i)  # restarted unarmed: it recovers the task
        run.finish()
    finally:
        run.stop()


def test_worker_killed_while_restoring(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=2)
        run.feed(300_000, seconds=4)
        run.wait_for_checkpoints(2)
        for i in range(2):  # everything dies; the next incarnations restore
            run.kill_worker(i)
        for i in range(2):
            run.start_worker(i, fault="restoring@count-0")
        for i in _died_at(run, "restoring"):
            run.start_worker(i)
        run.finish()
    finally:
        run.stop()


def test_coordinator_killed_after_recording_a_checkpoint(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start_coordinator(fault="coordinator_recorded#2")
        run.start_worker(0)
        run.start_worker(1)
        run.feed(300_000, seconds=4)
        assert run.coordinator is not None
        wait_until(lambda: run.coordinator.poll() is not None, 60, "the coordinator to die")
        assert run.coordinator.returncode == -signal.SIGKILL
        assert "fault point coordinator_recorded reached" in run.log("coordinator")
        run.start_coordinator()
        run.finish()
    finally:
        run.stop()


@pytest.mark.parametrize("task", ["split-0", "count-0"])
def test_a_worker_restarted_at_once_after_its_commit_holds_no_checkpoint_back(
    task: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Killed between its commit and its acknowledgement, and restarted under its id long
    before its heartbeat timeout (a supervisor's restart): its task restores at the
    checkpoint it never acknowledged, so the coordinator must fail that checkpoint at the new
    process's first heartbeat (processor/coordinator/reports.py) instead of holding every
    later one back until its timeout (2 minutes here). Heartbeats 2 s apart: the task has
    restored before the next one, so a stale "running" is all the coordinator would see."""
    run = JobRun(
        kafka_bootstrap,
        tmp_path,
        interval_ms=500,
        heartbeat_interval_ms="2000",
        worker_timeout_ms="60000",
        checkpoint_timeout_ms="120000",
    )
    try:
        run.start_coordinator()
        for i in range(2):
            run.start_worker(i, fault=f"committed@{task}#2")
        run.feed(300_000, seconds=4)
        for i in _died_at(run, "committed"):
            run.start_worker(i)
        run.wait_for_checkpoints(2, timeout=45)
        run.finish()
    finally:
        run.stop()
