"""The word count with its checkpoints in S3 (a real S3 API server): exact output through
SIGKILLed workers, and through an outage of the S3 server itself."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from processor.config import S3Location
from tests.conftest import TEST_BUCKET, TEST_REGION, TEST_S3_PORT, create_bucket, s3_storage_for
from tests.integration.harness import JobRun, wait_until
from tests.s3server import S3Server


def _job(bootstrap: str, workdir: Path, server: S3Server, location: S3Location) -> JobRun:
    # Checkpoints every second: each is a dozen requests per task, and on a loaded machine
    # 500 ms let barriers queue up faster than the snapshots finished.
    return JobRun(
        bootstrap,
        workdir,
        interval_ms=1000,
        checkpoint_dir=str(location),
        s3_endpoint_url=server.endpoint_url,
        s3_region=TEST_REGION,
        s3_access_key_id=server.access_key_id,
        s3_secret_access_key=server.secret_access_key,
    )


def _logs(run: JobRun, workers: int) -> str:
    return "\n".join(run.log(n) for n in ["coordinator", *(f"worker-{i}" for i in range(workers))])


def test_sigkilled_workers_restore_from_s3(
    kafka_bootstrap: str, s3_server: S3Server, s3_location: S3Location, tmp_path: Path
) -> None:
    run = _job(kafka_bootstrap, tmp_path, s3_server, s3_location)
    try:
        run.start(workers=2)
        run.feed(400_000, seconds=8)
        run.wait_for_checkpoints(2)
        run.kill_worker(0)
        run.start_worker(0)
        run.wait_for_checkpoints(1)
        run.kill_worker(1)
        run.start_worker(1)
        assert run.finish() >= len(run.expected)
        logs = _logs(run, 2)
        assert "restored checkpoint" in logs, "no task was restored from S3"
        stored = s3_storage_for(s3_server, s3_location).list(f"{run.job}/")
        assert any(key.endswith("/_snapshot.json") for key in stored)
        assert any("/shared/" in key for key in stored)
        assert not (tmp_path / "checkpoints").exists()  # nothing went to the default directory
        assert s3_server.secret_access_key not in logs
    finally:
        run.stop()


def test_s3_outage_declines_checkpoints_and_the_job_recovers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The S3 server dies mid-stream (SIGKILL) and comes back: snapshots fail and the tasks
    (no failure tolerated) fail and retry their restore until it is back; nothing is lost."""
    server = S3Server(port=TEST_S3_PORT + 1, data_dir=tmp_path / "s3")
    server.start(timeout=120)
    try:
        create_bucket(server, TEST_BUCKET)
        location = S3Location(TEST_BUCKET, f"outage/{uuid.uuid4().hex[:8]}")
        run = _job(kafka_bootstrap, tmp_path, server, location)
        try:
            run.start(workers=2)
            run.feed(400_000, seconds=10)
            run.wait_for_checkpoints(2)
            server.stop(sig=9)
            wait_until(
                lambda: "declined, snapshot failed" in _logs(run, 2), 60, "a declined checkpoint"
            )
            time.sleep(2)  # a few checkpoint intervals without storage
            before = run.completed_checkpoints()
            server.start(timeout=120)
            assert run.finish() >= len(run.expected)
            assert run.completed_checkpoints() > before
            logs = _logs(run, 2)
            assert "S3StorageError" in logs
            assert server.secret_access_key not in logs
            assert server.access_key_id not in logs
        finally:
            run.stop()
    finally:
        server.stop()
