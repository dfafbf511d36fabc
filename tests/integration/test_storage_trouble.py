"""Checkpoint storage fails for a while: snapshots are declined and counted; within the
tolerance the task carries on, past it the task fails and recovers. Output stays exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.harness import JobRun, wait_until


def _block(task_dir: Path) -> Path:
    """Make a task's checkpoint storage unwritable (root ignores permissions: use a file)."""
    aside = task_dir.with_name(task_dir.name + ".aside")
    task_dir.rename(aside)
    task_dir.write_text("not a directory")
    return aside


def _unblock(task_dir: Path, aside: Path) -> None:
    task_dir.unlink()
    aside.rename(task_dir)


@pytest.mark.parametrize("tolerated", [5, 0])
def test_unwritable_checkpoint_storage(
    tolerated: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(
        kafka_bootstrap,
        tmp_path,
        interval_ms=500,
        tolerable_checkpoint_failures=str(tolerated),
    )
    try:
        run.start(workers=2)
        run.feed(400_000, seconds=8)
        run.wait_for_checkpoints(2)
        task_dir = tmp_path / "checkpoints" / run.job / "count-0"
        aside = _block(task_dir)

        def logs() -> str:
            return run.log("worker-0") + run.log("worker-1")

        wait_until(lambda: "count-0: checkpoint" in logs(), 30, "a declined checkpoint")
        time.sleep(1.2)
        _unblock(task_dir, aside)
        run.finish()
        assert "declined, snapshot failed" in logs()
        assert "declined by count-0: snapshot failed" in run.log("coordinator")
        if tolerated:
            # Declined and carried on: never failed, never restored.
            assert "task count-0 failed" not in logs()
        else:
            assert "task count-0 failed" in logs()
            assert "PROCESSOR_TOLERABLE_CHECKPOINT_FAILURES=0" in logs()
    finally:
        run.stop()
