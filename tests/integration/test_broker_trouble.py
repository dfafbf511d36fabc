"""The broker is down when the job starts, and restarts in the middle: the job waits, resumes
by itself, and the output stays exact."""

from __future__ import annotations

import time
from pathlib import Path

from processor.localkafka.broker import LocalBroker
from tests.integration.harness import JobRun, wait_until
from tests.workers import worker_port

# A broker of its own: restarting the session's broker would disturb other tests. Below the
# ephemeral port range, like every test port (see tests/conftest.py).
PORT = worker_port(19192)


def test_broker_down_at_start_then_restarted_mid_run(tmp_path: Path) -> None:
    broker = LocalBroker(port=PORT, controller_port=PORT + 1, data_dir=tmp_path / "kafka")
    broker.start(timeout=120)
    run = JobRun(broker.bootstrap, tmp_path, interval_ms=500)
    broker.stop()
    try:
        # 1. No broker: the services wait with a clear line, no crash loop.
        run.start(workers=2)
        wait_until(lambda: "waiting for Kafka" in run.log("coordinator"), 30, "a waiting line")
        time.sleep(3)
        assert run.coordinator is not None and run.coordinator.poll() is None
        assert not run.dead_workers()
        broker.start(timeout=120)
        run.feed(600_000, seconds=10)
        run.wait_for_checkpoints(3, timeout=120)
        # 2. The broker restarts mid-stream: open transactions fail, tasks restart from
        # their last commit.
        broker.stop()
        time.sleep(2)
        broker.start(timeout=120)
        assert run.finish() > 0
    finally:
        run.stop()
        broker.stop()
