"""Savepoints: taken from a running job, restored into a new job with another number of
shuffle partitions (state redistributed by key); the output goes on exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from processor.commands import corpus
from processor.runtime.keyed import STATE_FORMAT
from processor.state.rocksdb.snapshots import seal_manifest
from processor.state.savepoints import MANIFEST_NAME, Savepoint
from processor.state.storage import DirectoryStorage
from tests.integration.harness import JobRun, SuccessorRun


def _savepoint(run: JobRun, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", "savepoint", *args],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize(("before", "after"), [(8, 4), (4, 16)])
def test_restore_a_savepoint_with_another_shuffle_partition_count(
    before: int, after: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    first = JobRun(
        kafka_bootstrap, tmp_path / "first", interval_ms=300, shuffle_partitions=str(before)
    )
    second: JobRun | None = None
    try:
        first.produce(line.encode() for line in corpus.lines(60_000, seed=3))
        first.start(workers=2)
        first.wait_idle(180)
        # The job is idle: a savepoint now holds everything it wrote (stop-with-savepoint),
        # so the restored job's output goes on strictly increasing per word.
        first.start_coordinator(exit_when_idle=False)
        taken = _savepoint(first, "--name", f"sp-{first.job}")
        assert taken.returncode == 0, taken.stderr
        assert f"savepoint sp-{first.job}: checkpoint" in taken.stdout
        assert f"sp-{first.job}" in _savepoint(first, "--list").stdout
        first.stop()

        second = SuccessorRun(
            first,
            tmp_path / "second",
            interval_ms=300,
            shuffle_partitions=str(after),
            from_savepoint=f"sp-{first.job}",
        )
        second.produce(line.encode() for line in corpus.lines(40_000, seed=4))
        second.start(workers=2)
        assert second.finish(240) > 0
        assert f"starts from savepoint sp-{first.job}" in second.log("coordinator")
        workers = second.log("worker-0") + second.log("worker-1")
        # Each keyed task loaded its keys (again, if it moved before its first commit).
        for i in range(after):
            assert f"count-{i}: loaded" in workers
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_savepoint_of_a_job_that_never_ran_is_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path)
    taken = _savepoint(run, "--timeout", "5")
    assert taken.returncode == 1
    assert taken.stderr.strip().splitlines() == [
        f"processor: job {run.job} has no {run.job}.checkpoints topic: no coordinator ever ran it"
    ]


def test_state_the_pipeline_dropped_is_refused_in_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path)
    location = tmp_path / "sp"
    saved = Savepoint("", "old", 5, "t", STATE_FORMAT, {}, {}, {"count": ["counts", "gone"]})
    DirectoryStorage(location).put_bytes(MANIFEST_NAME, seal_manifest(saved.to_json()))
    result = subprocess.run(
        [sys.executable, "-m", "processor", "coordinator", "--from-savepoint", str(location)],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"processor: savepoint {str(location)!r} has state of operators the pipeline does not "
        "have: gone (PROCESSOR_ALLOW_DROPPED_STATE=true drops it)"
    ]
