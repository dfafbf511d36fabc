"""Exactly-once under SIGKILL: workers and the coordinator die mid-stream, output stays exact."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.integration.harness import JobRun

# CI runs a short stream; PROCESSOR_CRASH_WORDS=5000000 runs the multi-million-word version.
WORDS = int(os.environ.get("PROCESSOR_CRASH_WORDS", "1000000"))


def test_sigkill_workers_mid_stream_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=3)
        run.feed(WORDS, seconds=12)
        run.wait_for_checkpoints(2)
        # 1. Kill and restart at once (a supervisor restarting a crashed process).
        run.kill_worker(0)
        run.start_worker(0)
        run.wait_for_checkpoints(1)
        # 2. Kill and leave it dead past the heartbeat timeout: its tasks move elsewhere.
        run.kill_worker(1)
        time.sleep(3.5)
        run.start_worker(1)
        run.wait_for_checkpoints(1)
        # 3. Two at once.
        run.kill_worker(0)
        run.kill_worker(2)
        run.start_worker(0)
        run.start_worker(2)
        run.wait_for_checkpoints(1)
        # 4. One more, late in the stream.
        run.kill_worker(1)
        run.start_worker(1)
        assert run.finish() >= len(run.expected)
        restores = sum(run.log(f"worker-{i}").count("restored checkpoint") for i in range(3))
        assert restores > 0, "no task was restored from a snapshot: the kills came too early"
    finally:
        run.stop()


def test_sigstopped_worker_is_fenced_as_a_zombie(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A paused worker loses its tasks; when it wakes up it cannot write a single record."""
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=2)
        run.feed(400_000, seconds=6)
        run.wait_for_checkpoints(2)
        run.kill_worker(0, signal.SIGSTOP)
        time.sleep(4)  # past the heartbeat timeout: worker-1 takes over and fences it
        run.kill_worker(0, signal.SIGCONT)
        run.finish()
    finally:
        run.stop()


def test_coordinator_killed_mid_stream_and_restarted(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The coordinator holds nothing that matters for correctness: kill it, start another."""
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=2)
        run.feed(400_000, seconds=6)
        run.wait_for_checkpoints(2)
        before = run.completed_checkpoints()
        run.kill_coordinator()
        time.sleep(1)
        run.start_coordinator()
        run.finish()
        # The new coordinator continued the checkpoint ids instead of starting over.
        ids = [
            int(line.split("checkpoint ")[1].split()[0])
            for line in run.log("coordinator").splitlines()
            if " complete in " in line
        ]
        assert len(ids) > before and ids == sorted(ids)
    finally:
        run.stop()
