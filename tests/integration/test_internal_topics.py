"""Bad records on the job's internal topics (issue 25): records that are no checkpoint in
``<job>.checkpoints`` and a heartbeat of the wrong shape in ``<job>.control``, then a
coordinator SIGKILL. Before, the restarted coordinator crash-looped on the first
(``JSONDecodeError`` at every start) and the running one raised on the second, while the
job's output stalled. Now they are skipped, counted and logged, and the output is exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.harness import JobRun

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

BAD_CHECKPOINTS = [b"not json", b'{"id": "x", "tasks": {}}', b"[1, 2]"]
BAD_HEARTBEAT = (
    b'{"kind":"heartbeat","worker":"intruder","incarnation":"i",'
    b'"tasks":{"count-0":{"state":"running","checkpoint":"x"}}}'
)


def test_bad_internal_records_are_skipped_and_the_output_stays_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=2)
        run.feed(200_000, seconds=6)
        run.wait_for_checkpoints(2)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for raw in BAD_CHECKPOINTS:
            producer.produce(run.settings.checkpoints_topic, raw, key=b"bad")
        producer.produce(run.settings.control_topic, BAD_HEARTBEAT)
        producer.flush(30)
        time.sleep(1)  # the running coordinator reads the heartbeat
        assert run.coordinator is not None and run.coordinator.poll() is None
        run.kill_coordinator()
        run.start_coordinator()
        run.finish()
        log = run.log("coordinator")
        assert "Traceback" not in log, log[-3000:]
        assert f"of {run.settings.checkpoints_topic} that are not valid" in log
        assert f"of {run.settings.control_topic} that are not valid" in log
    finally:
        run.stop()
