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


def _forged_control(now_ms: int) -> list[bytes]:
    """Issue 41, item 3: records of the right types, out of range or implausible."""
    huge = 2**63 - 1
    return [
        # An ack whose 400-digit watermark made the status publisher raise OverflowError.
        b'{"kind":"ack","task":"count-0","checkpoint":1,"worker":"intruder","records_in":0,'
        b'"records_out":0,"lag":0,"positions":{},"watermark_ms":1' + b"0" * 400 + b"}",
        # Heartbeats naming a checkpoint whose next id overflows 64 bits, or far above.
        b'{"kind":"heartbeat","worker":"intruder","incarnation":"i",'
        b'"tasks":{"count-0":{"state":"running","checkpoint":%d}}}' % huge,
        b'{"kind":"heartbeat","worker":"intruder","incarnation":"i",'
        b'"tasks":{"count-0":{"state":"running","checkpoint":%d}}}' % 2**62,
        # Assignments that every worker took, then ignoring the real ones.
        b'{"kind":"assignment","generation":%d,"input_partitions":4,"tasks":{}}' % 10**19,
        b'{"kind":"assignment","generation":%d,"input_partitions":4,"tasks":{}}'
        % (now_ms + 300_000),
        # A trigger far above every task's checkpoint.
        b'{"kind":"trigger","checkpoint":%d,"triggered_at":1.0}' % 2**62,
        # Lease renewals from the future: a new coordinator would wait, or exit.
        b'{"kind":"lease","incarnation":"intruder","renewed_at":1e12}',
        b'{"kind":"lease","incarnation":"intruder","renewed_at":%d}' % huge,
    ]


def _forged_checkpoint(checkpoint_id: int) -> bytes:
    # One source task where the job has four: check_history would refuse every start.
    return (
        b'{"id":%d,"triggered_at":1.0,"completed_at":2.0,'
        b'"tasks":{"split-0":{"worker":"intruder","positions":{"0":1}}}}' % checkpoint_id
    )


def test_forged_records_in_range_of_their_types_neither_crash_nor_stall_the_job(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start(workers=2)
        run.feed(200_000, seconds=8)
        run.wait_for_checkpoints(2)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for checkpoint_id in (2**63 - 1, 2**62):
            producer.produce(
                run.settings.checkpoints_topic, _forged_checkpoint(checkpoint_id), key=b"forged"
            )
        for raw in _forged_control(int(time.time() * 1000)):
            producer.produce(run.settings.control_topic, raw)
        producer.flush(30)
        time.sleep(2)  # the running coordinator and the workers read them
        assert run.coordinator is not None and run.coordinator.poll() is None
        run.wait_for_checkpoints(2)  # checkpoints go on, with ids that fit
        run.kill_coordinator()
        run.start_coordinator()
        run.finish()
        log = run.log("coordinator")
        assert "Traceback" not in log and "already has a running" not in log, log[-3000:]
        assert f"of {run.settings.checkpoints_topic} that are not valid" in log
        assert f"of {run.settings.control_topic} that are not valid" in log
        for i in (0, 1):
            assert "Traceback" not in run.log(f"worker-{i}"), run.log(f"worker-{i}")[-3000:]
    finally:
        run.stop()
