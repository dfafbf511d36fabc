"""Forged internal records in range (issue 41, item 3): each record of the issue, as a
topic writer would put it on ``<job>.control`` or ``<job>.checkpoints``, is refused where it
is read (decoded to None, or found implausible), so nothing overflows, crashes or waits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from processor.checkpointing.coordinator import CheckpointCoordinator
from processor.config import Settings
from processor.coordinator.lease import lease_renewal
from processor.coordinator.status.page import _fmt_watermark
from processor.jobs.assignment import FollowedAssignment
from processor.models import control
from processor.models.internal import checkpoint_record, plausible_history
from processor.models.limits import INT64_MAX, MAX_CLOCK_SKEW_S, MAX_ID, MAX_ID_JUMP

NOW = 1_760_000_000.0  # a wall clock, Unix seconds


def _checkpoint(checkpoint_id: int, completed_at: float = NOW) -> bytes:
    tasks = {"split-0": {"worker": "w1", "positions": {"0": 5}}}
    doc = {"id": checkpoint_id, "triggered_at": completed_at - 1, "completed_at": completed_at}
    return json.dumps({**doc, "tasks": tasks}).encode()


def test_a_checkpoints_record_out_of_range_is_not_a_checkpoint() -> None:
    assert checkpoint_record(_checkpoint(7)) is not None
    assert checkpoint_record(_checkpoint(INT64_MAX)) is None  # the record
    assert checkpoint_record(_checkpoint(MAX_ID + 1)) is None
    assert checkpoint_record(_checkpoint(7, completed_at=float(10**20))) is None
    assert checkpoint_record(_checkpoint(7).replace(b'"0": 5', b'"0": 1' + b"0" * 400)) is None


def test_a_checkpoint_id_far_above_the_history_is_dropped_with_all_above_it() -> None:
    records = [checkpoint_record(_checkpoint(i)) for i in (40, 41, 43, MAX_ID, 44)]
    kept, dropped = plausible_history([r for r in records if r is not None], NOW)
    assert [r["id"] for r in kept] == [40, 41, 43, 44]
    assert [r["id"] for r in dropped] == [MAX_ID]
    # Alone, on a fresh job's topic: ids start at 0, so it is no history either.
    assert plausible_history([{"id": MAX_ID_JUMP + 1, "tasks": {}}], NOW) == (
        [],
        [{"id": MAX_ID_JUMP + 1, "tasks": {}}],
    )
    # Completed in the future: dropped alone, the history above it stays.
    future = {"id": 2, "completed_at": NOW + 2 * MAX_CLOCK_SKEW_S, "tasks": {}}
    kept, dropped = plausible_history([future, {"id": 3, "completed_at": NOW, "tasks": {}}], NOW)
    assert ([r["id"] for r in kept], dropped) == ([3], [future])


def _ack(watermark: str) -> bytes:
    return (
        b'{"kind":"ack","task":"count-0","checkpoint":3,"worker":"w1","records_in":1,'
        b'"records_out":1,"lag":0,"positions":{"0":5},"watermark_ms":%s}' % watermark.encode()
    )


def test_an_ack_with_a_400_digit_watermark_is_not_an_ack() -> None:
    assert isinstance(control.decode(_ack("1700000000000")), control.Ack)
    assert control.decode(_ack("1" + "0" * 400)) is None
    assert control.decode(_ack(str(-(MAX_ID + 1)))) is None
    # What passes, the status page shows: no OverflowError in the status publisher.
    assert _fmt_watermark(MAX_ID) and _fmt_watermark(-MAX_ID)
    for field, value in [
        ("records_in", str(INT64_MAX + 1)),
        ("lag", "-1"),
        ("positions", f'{{"0":{INT64_MAX + 1}}}'),
        ("sync_s", "1e400"),
        ("upload_s", "-1.0"),
    ]:
        raw = json.loads(_ack("null"))
        raw[field] = json.loads(value) if field != "sync_s" else float("inf")
        assert control.decode(json.dumps(raw).encode()) is None, field


def test_a_heartbeat_naming_checkpoint_2_63_is_not_learnt() -> None:
    heartbeat = b'{"kind":"heartbeat","worker":"w1","incarnation":"i","tasks":{"split-0":%s}}'
    status = b'{"state":"running","checkpoint":%d}'
    assert control.decode(heartbeat % (status % INT64_MAX)) is None
    in_range = control.decode(heartbeat % (status % MAX_ID))
    assert isinstance(in_range, control.Heartbeat)
    checkpoints = CheckpointCoordinator(["split-0"], last_id=12)
    assert not checkpoints.observe(in_range.tasks["split-0"].checkpoint)
    assert checkpoints.observe(12 + MAX_ID_JUMP)  # tasks' parts of failed checkpoints
    checkpoint_id, _ = checkpoints.trigger(NOW)
    assert checkpoint_id == 13 + MAX_ID_JUMP < INT64_MAX  # the next barrier id fits
    # The ceiling is the history's, not what was observed: another jump is refused.
    assert not checkpoints.observe(checkpoint_id + MAX_ID_JUMP)
    ack = control.Ack("split-0", MAX_ID, "w1", 0, 0, 0, {})
    assert checkpoints.on_ack(ack, NOW) is None
    assert checkpoints.on_decline(MAX_ID, "split-0", "forged") is None
    assert checkpoints.last_id == checkpoint_id


def test_an_assignment_with_generation_10_19_is_not_one_and_a_forged_one_gives_way() -> None:
    raw = b'{"kind":"assignment","generation":%d,"input_partitions":1,"tasks":{}}'
    assert control.decode(raw % 10**19) is None
    assert control.decode((raw % 5).replace(b":1,", b":%d," % 10**12)) is None
    ahead = control.decode(raw % int((NOW + 2 * MAX_CLOCK_SKEW_S) * 1000))
    assert ahead is not None and control.ahead_of(ahead, NOW)
    real = control.Assignment(int(NOW * 1000) - 5000, 1, {"split-0": "w1"}, "coordinator-1")
    assert not control.ahead_of(real, NOW)
    # A forged one within the clock skew is followed, but only until it is not sent again.
    forged = control.Assignment(int(NOW * 1000) + 1000, 1, {}, "forger")
    followed = FollowedAssignment(timeout_s=3.0)
    assert followed.offer(real, now=0.0)
    assert followed.offer(forged, now=0.5)
    assert not followed.offer(real, now=1.0)  # the coordinator sends it every heartbeat
    assert followed.offer(real, now=3.6)  # the forged one was not heard again for 3 s
    assert followed.current == real


@pytest.mark.parametrize("renewed_at", ["future", "1e300", "-1.0", "NaN", "Infinity"])
def test_a_lease_renewal_from_the_future_or_out_of_range_is_no_renewal(
    renewed_at: str,
) -> None:
    if renewed_at == "future":
        renewed_at = str(time.time() + 2 * MAX_CLOCK_SKEW_S)
    raw = b'{"kind":"lease","incarnation":"forger","renewed_at":%s}' % renewed_at.encode()
    assert lease_renewal(raw) is None
    now = b'{"kind":"lease","incarnation":"c1","renewed_at":%f}' % time.time()
    assert lease_renewal(now) == control.decode(now)


def test_a_worker_skips_a_trigger_far_above_its_checkpoints(tmp_path: Path) -> None:
    from processor.worker.service import Worker

    settings = Settings(
        bootstrap_servers="127.0.0.1:1",  # never reached: the clients connect lazily
        state_dir=tmp_path / "state",
        worker_id="w1",
    )
    worker = Worker(settings)
    try:
        assert worker._handle(control.Trigger(5, NOW))
        assert not worker._handle(control.Trigger(6 + MAX_ID_JUMP, NOW))
        assert worker._handle(control.Trigger(5 + MAX_ID_JUMP, NOW))
        # A completion far ahead would let sources write early while a barrier is on its way.
        assert not worker._handle(control.Completed(6 + 2 * MAX_ID_JUMP))
        assert worker._handle(control.Completed(5 + 2 * MAX_ID_JUMP))
        ahead = control.Assignment(int((time.time() + 2 * MAX_CLOCK_SKEW_S) * 1000), 1, {})
        assert not worker._handle(ahead)
    finally:
        worker._control.close()
