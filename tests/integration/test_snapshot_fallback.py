"""A task's committed snapshot is gone: it falls back to an older one only when that is safe,
replaying the records in between without output; otherwise it fails and says why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from confluent_kafka import TopicPartition

from processor.worker.task import committed_after_fencing
from tests.integration.harness import JobRun, wait_until


def _committed_checkpoint(run: JobRun, partition: int) -> tuple[int, str]:
    """The checkpoint id and snapshot owner of the last stable commit (the killed workers'
    open transactions will be aborted)."""
    tp = TopicPartition(run.settings.shuffle_topic, partition)
    (committed,) = committed_after_fencing(run.settings, [tp])
    meta = json.loads(committed.metadata or "{}")
    return int(meta["checkpoint"]), str(meta["snapshot"])


def _stop_workers_after_progress(run: JobRun) -> Path:
    run.start(workers=2)
    run.feed(400_000, seconds=8)
    run.wait_for_checkpoints(5)
    for i in range(2):
        run.kill_worker(i)
    return run.workdir / "checkpoints" / run.job / "count-0"


def test_missing_committed_snapshot_falls_back_safely(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        snapshots = _stop_workers_after_progress(run)
        committed, owner = _committed_checkpoint(run, 0)
        (snapshots / owner / f"chk-{committed:012d}" / "_snapshot.json").unlink()
        for i in range(2):
            run.start_worker(i)
        run.finish()
        logs = run.log("worker-0") + run.log("worker-1")
        assert f"checkpoint {committed} ({owner}) of {run.job}/count-0: manifest missing" in logs
        assert "count-0: falling back to checkpoint" in logs
        assert "count-0: replay after the fallback is done" in logs
    finally:
        run.stop()


def test_no_usable_snapshot_fails_the_task_with_the_reason(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        snapshots = _stop_workers_after_progress(run)
        committed, owner = _committed_checkpoint(run, 0)
        shutil.rmtree(snapshots)
        for i in range(2):
            run.start_worker(i)

        def failing() -> bool:
            logs = run.log("worker-0") + run.log("worker-1")
            return logs.count("task count-0 failed") >= 2

        wait_until(failing, 60, "count-0 to fail twice")
        logs = run.log("worker-0") + run.log("worker-1")
        assert f"checkpoint {committed} ({owner}) of {run.job}/count-0" in logs
        assert "no older snapshot can stand in for it" in logs
        assert not run.dead_workers(), "a task failure must not take its worker down"
    finally:
        run.stop()
