"""One coordinator per job (issue 25, item 1). Two coordinators of one job used to run side
by side, moving the workers' tasks back and forth without a word. Now: a second one exits
with one line naming the first; one started while the first hangs (SIGSTOP) takes over once
the lease expires, and the first, woken, finds itself fenced and exits with one line; the
output stays exact throughout."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import JobRun, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def _exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s") from None


def test_a_second_coordinator_exits_and_a_hung_one_is_fenced(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    first = second = None
    try:
        first = run._spawn("coordinator-1", "coordinator")
        run.start_worker(0)
        run.start_worker(1)
        run.feed(200_000, seconds=20)
        wait_until(lambda: " complete in " in run.log("coordinator-1"), 120, "a checkpoint")

        # A second coordinator of the same job, while the first runs: one line, exit 2.
        second = run._spawn("coordinator-2", "coordinator")
        assert _exit(second, 60) == 2
        line = run.log("coordinator-2").strip().splitlines()[-1]
        assert f"job {run.job} already has a running coordinator" in line, line
        assert first.poll() is None

        # The first hangs: a third one takes over once its lease expires.
        first.send_signal(signal.SIGSTOP)
        run.start_coordinator()  # exits once the job is idle: run.finish() waits for it
        wait_until(lambda: " complete in " in run.log("coordinator"), 120, "a checkpoint")
        first.send_signal(signal.SIGCONT)
        assert _exit(first, 60) == 2
        assert "took over (this one was fenced)" in run.log("coordinator-1")
        run.finish()
        assert "Traceback" not in run.log("coordinator") + run.log("coordinator-1")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
        run.stop()
