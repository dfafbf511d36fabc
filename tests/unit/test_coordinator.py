"""Checkpoint bookkeeping of the coordinator: trigger, acks, declines, timeouts. No I/O."""

from __future__ import annotations

import json
import random
from dataclasses import FrozenInstanceError
from typing import Any

import pytest

from processor.checkpointing.coordinator import (
    CheckpointCoordinator,
    CompletedCheckpoint,
    FailedCheckpoint,
    PendingCheckpoint,
)
from processor.models.control import Ack

TASKS = ["split-0", "count-0", "count-1"]


def ack(task: str, checkpoint: int, **kw: Any) -> Ack:
    fields: dict[str, Any] = {
        "worker": "w1",
        "records_in": 0,
        "records_out": 0,
        "lag": 0,
        "positions": {},
    }
    fields.update(kw)
    return Ack(task=task, checkpoint=checkpoint, **fields)


def ack_all(
    coord: CheckpointCoordinator, checkpoint: int, now: float, tasks: list[str] = TASKS
) -> CompletedCheckpoint | None:
    done: CompletedCheckpoint | None = None
    for i, t in enumerate(tasks):
        done = coord.on_ack(ack(t, checkpoint), now)
        if i < len(tasks) - 1:
            assert done is None
    return done


# --- ids --------------------------------------------------------------------------------------


def test_trigger_ids_are_monotonic_from_one() -> None:
    coord = CheckpointCoordinator(TASKS)
    ids = [coord.trigger(float(i))[0] for i in range(5)]
    assert ids == [1, 2, 3, 4, 5]
    assert coord.last_id == 5
    assert sorted(coord.pending) == ids


def test_trigger_continues_after_last_id() -> None:
    coord = CheckpointCoordinator(TASKS, last_id=41)
    assert coord.trigger(0.0) == (42, [])
    assert coord.trigger(0.0) == (43, [])


def test_trigger_records_pending_checkpoint() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, failed = coord.trigger(12.5)
    assert failed == []
    assert coord.pending == {cid: PendingCheckpoint(cid, 12.5, {})}


def test_observe_bumps_ids_but_never_lowers_them() -> None:
    coord = CheckpointCoordinator(TASKS, last_id=3)
    coord.observe(10)
    assert coord.last_id == 10
    coord.observe(7)
    assert coord.last_id == 10
    coord.observe(10)
    assert coord.last_id == 10
    assert coord.trigger(0.0)[0] == 11


def test_ack_of_unknown_checkpoint_is_observed() -> None:
    coord = CheckpointCoordinator(TASKS)
    assert coord.on_ack(ack("split-0", 50), now=1.0) is None
    assert coord.pending == {}
    assert coord.trigger(2.0)[0] == 51


def test_decline_of_unknown_checkpoint_is_observed() -> None:
    coord = CheckpointCoordinator(TASKS)
    assert coord.on_decline(77, "count-0", "boom") is None
    assert coord.trigger(2.0)[0] == 78


def test_ack_from_unknown_task_is_observed_too() -> None:
    coord = CheckpointCoordinator(TASKS)
    assert coord.on_ack(ack("stranger-9", 20), now=0.0) is None
    assert coord.last_id == 20


def test_ids_never_repeat_across_a_mix_of_triggers_and_observations() -> None:
    rng = random.Random(3)
    coord = CheckpointCoordinator(TASKS)
    handed_out: list[int] = []
    for _ in range(500):
        if rng.random() < 0.3:
            coord.observe(rng.randint(0, coord.last_id + 20))
        else:
            handed_out.append(coord.trigger(0.0)[0])
    assert handed_out == sorted(set(handed_out))


# --- completion ---------------------------------------------------------------------------------


def test_completes_only_when_every_task_acked() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(10.0)
    assert coord.on_ack(ack("split-0", cid), now=11.0) is None
    assert coord.on_ack(ack("count-0", cid), now=12.0) is None
    assert coord.last_completed is None
    assert set(coord.pending[cid].acks) == {"split-0", "count-0"}
    done = coord.on_ack(ack("count-1", cid), now=13.0)
    assert done is not None
    assert done.checkpoint_id == cid
    assert done.triggered_at == 10.0
    assert done.completed_at == 13.0
    assert set(done.acks) == set(TASKS)
    assert coord.last_completed == done
    assert coord.pending == {}


def test_single_task_job_completes_on_its_ack() -> None:
    coord = CheckpointCoordinator(["only-0"])
    cid, _ = coord.trigger(0.0)
    done = coord.on_ack(ack("only-0", cid), now=1.0)
    assert done is not None and done.checkpoint_id == cid


def test_duplicate_ack_does_not_count_twice() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    for _ in range(3):
        assert coord.on_ack(ack("split-0", cid), now=1.0) is None
        assert coord.on_ack(ack("count-0", cid), now=1.0) is None
    assert cid in coord.pending
    done = coord.on_ack(ack("count-1", cid), now=2.0)
    assert done is not None


def test_duplicate_ack_replaces_the_earlier_one() -> None:
    coord = CheckpointCoordinator(["a-0", "b-0"])
    cid, _ = coord.trigger(0.0)
    coord.on_ack(ack("a-0", cid, records_in=1), now=1.0)
    coord.on_ack(ack("a-0", cid, records_in=5), now=1.0)
    done = coord.on_ack(ack("b-0", cid, records_in=2), now=1.0)
    assert done is not None
    assert done.records_in == 7


def test_ack_for_unknown_checkpoint_is_ignored() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    assert coord.on_ack(ack("split-0", cid + 5), now=1.0) is None
    assert coord.pending[cid].acks == {}
    assert list(coord.pending) == [cid]


def test_ack_for_completed_checkpoint_is_ignored() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    done = ack_all(coord, cid, now=1.0)
    assert done is not None
    assert coord.on_ack(ack("split-0", cid), now=2.0) is None
    assert coord.last_completed is done
    assert coord.pending == {}


def test_ack_from_unknown_task_is_ignored() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    assert coord.on_ack(ack("split-1", cid), now=1.0) is None
    assert coord.pending[cid].acks == {}
    # Even with as many distinct acks as there are tasks, a stranger never completes it.
    coord.on_ack(ack("split-0", cid), now=1.0)
    coord.on_ack(ack("count-0", cid), now=1.0)
    assert coord.on_ack(ack("count-9", cid), now=1.0) is None
    assert cid in coord.pending
    assert coord.on_ack(ack("count-1", cid), now=1.0) is not None


def test_completed_acks_are_a_copy() -> None:
    coord = CheckpointCoordinator(["a-0"])
    cid, _ = coord.trigger(0.0)
    pending = coord.pending[cid]
    done = coord.on_ack(ack("a-0", cid), now=1.0)
    assert done is not None
    pending.acks.clear()
    assert set(done.acks) == {"a-0"}


def test_completion_subsumes_older_pending_checkpoints() -> None:
    coord = CheckpointCoordinator(TASKS)
    c1, _ = coord.trigger(0.0)
    c2, _ = coord.trigger(1.0)
    c3, _ = coord.trigger(2.0)
    coord.on_ack(ack("split-0", c1), now=2.5)
    done = ack_all(coord, c2, now=3.0)
    assert done is not None and done.checkpoint_id == c2
    assert list(coord.pending) == [c3]  # newer stays pending, older is gone
    # Late acks of the subsumed checkpoint complete nothing and do not resurrect it.
    assert ack_all(coord, c1, now=4.0) is None
    assert coord.last_completed is done
    assert list(coord.pending) == [c3]
    later = ack_all(coord, c3, now=5.0)
    assert later is not None and later.checkpoint_id == c3
    assert coord.last_completed is later


def test_checkpoints_complete_out_of_trigger_order_only_forwards() -> None:
    coord = CheckpointCoordinator(["a-0", "b-0"])
    c1, _ = coord.trigger(0.0)
    c2, _ = coord.trigger(0.0)
    coord.on_ack(ack("a-0", c1), now=1.0)
    coord.on_ack(ack("a-0", c2), now=1.0)
    assert coord.on_ack(ack("b-0", c2), now=1.0) is not None
    # c1 was one ack away, but c2 completed first and subsumed it.
    assert coord.on_ack(ack("b-0", c1), now=1.0) is None
    assert coord.last_completed is not None and coord.last_completed.checkpoint_id == c2


# --- decline ------------------------------------------------------------------------------------


def test_decline_fails_a_pending_checkpoint() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    coord.on_ack(ack("split-0", cid), now=1.0)
    failed = coord.on_decline(cid, "count-1", "disk full")
    assert failed == FailedCheckpoint(cid, "declined by count-1: disk full")
    assert coord.pending == {}
    # Later acks of the declined checkpoint are ignored.
    assert coord.on_ack(ack("count-0", cid), now=2.0) is None
    assert coord.on_ack(ack("count-1", cid), now=2.0) is None
    assert coord.last_completed is None


def test_decline_of_non_pending_checkpoint_is_ignored() -> None:
    coord = CheckpointCoordinator(TASKS)
    cid, _ = coord.trigger(0.0)
    assert coord.on_decline(cid, "count-1", "x") is not None
    assert coord.on_decline(cid, "count-1", "x") is None  # twice
    c2, _ = coord.trigger(0.0)
    assert ack_all(coord, c2, now=1.0) is not None
    assert coord.on_decline(c2, "count-0", "late") is None  # already completed


def test_decline_leaves_other_checkpoints_alone() -> None:
    coord = CheckpointCoordinator(TASKS)
    c1, _ = coord.trigger(0.0)
    c2, _ = coord.trigger(0.0)
    c3, _ = coord.trigger(0.0)
    assert coord.on_decline(c2, "split-0", "r") is not None
    assert sorted(coord.pending) == [c1, c3]


# --- expiry -------------------------------------------------------------------------------------


def test_expire_after_timeout_names_the_missing_tasks() -> None:
    coord = CheckpointCoordinator(TASKS, timeout_s=10.0)
    cid, _ = coord.trigger(100.0)
    coord.on_ack(ack("count-0", cid), now=101.0)
    assert coord.expire(now=105.0) == []
    assert coord.expire(now=110.0) == []  # exactly the timeout is not over it
    failed = coord.expire(now=110.5)
    assert failed == [FailedCheckpoint(cid, "timed out waiting for count-1, split-0")]
    assert coord.pending == {}
    assert coord.expire(now=200.0) == []
    assert coord.on_ack(ack("count-1", cid), now=111.0) is None


def test_expire_with_no_acks_names_every_task_sorted() -> None:
    coord = CheckpointCoordinator(TASKS, timeout_s=1.0)
    cid, _ = coord.trigger(0.0)
    assert coord.expire(now=2.0) == [
        FailedCheckpoint(cid, "timed out waiting for count-0, count-1, split-0")
    ]


def test_expire_only_the_overdue_checkpoints() -> None:
    coord = CheckpointCoordinator(TASKS, timeout_s=10.0)
    c1, _ = coord.trigger(0.0)
    c2, _ = coord.trigger(5.0)
    c3, _ = coord.trigger(9.0)
    failed = coord.expire(now=15.5)
    assert [f.checkpoint_id for f in failed] == [c1, c2]
    assert list(coord.pending) == [c3]


def test_ack_of_unknown_task_does_not_hide_a_missing_one() -> None:
    coord = CheckpointCoordinator(["a-0", "b-0"], timeout_s=1.0)
    cid, _ = coord.trigger(0.0)
    coord.on_ack(ack("a-0", cid), now=0.5)
    coord.on_ack(ack("zzz-0", cid), now=0.5)
    assert coord.expire(now=2.0) == [FailedCheckpoint(cid, "timed out waiting for b-0")]


# --- max pending --------------------------------------------------------------------------------


def test_max_pending_drops_the_oldest() -> None:
    coord = CheckpointCoordinator(TASKS, max_pending=2)
    assert coord.trigger(0.0) == (1, [])
    assert coord.trigger(1.0) == (2, [])
    cid, failed = coord.trigger(2.0)
    assert cid == 3
    assert failed == [FailedCheckpoint(1, "too many checkpoints in progress")]
    assert sorted(coord.pending) == [2, 3]
    cid, failed = coord.trigger(3.0)
    assert failed == [FailedCheckpoint(2, "too many checkpoints in progress")]
    assert sorted(coord.pending) == [3, 4]
    # A dropped checkpoint's acks complete nothing.
    assert ack_all(coord, 1, now=4.0) is None


def test_max_pending_counts_after_completions_and_declines() -> None:
    coord = CheckpointCoordinator(TASKS, max_pending=2)
    c1, _ = coord.trigger(0.0)
    coord.on_decline(c1, "split-0", "x")
    c2, _ = coord.trigger(0.0)
    assert coord.trigger(0.0)[1] == []
    assert sorted(coord.pending) == [c2, c2 + 1]


def test_max_pending_one_keeps_only_the_newest() -> None:
    coord = CheckpointCoordinator(TASKS, max_pending=1)
    for i in range(1, 6):
        cid, failed = coord.trigger(float(i))
        assert cid == i
        assert [f.checkpoint_id for f in failed] == ([] if i == 1 else [i - 1])
        assert list(coord.pending) == [i]


# --- CompletedCheckpoint ------------------------------------------------------------------------


def _completed() -> CompletedCheckpoint:
    acks = {
        "split-0": ack(
            "split-0",
            7,
            worker="w1",
            records_in=100,
            records_out=300,
            lag=5,
            positions={"0": 1234},
            alignment_s=0.0,
            sync_s=0.0,
            upload_s=0.0,
            commit_s=0.02,
        ),
        "count-0": ack(
            "count-0",
            7,
            worker="w2",
            records_in=200,
            records_out=10,
            lag=7,
            positions={"0": 55, "1": 66},
            state_bytes=4096,
            uploaded_bytes=1024,
            alignment_s=0.1,
            sync_s=0.2,
            upload_s=0.3,
            commit_s=0.04,
        ),
        "count-1": ack(
            "count-1",
            7,
            worker="w1",
            records_in=50,
            records_out=5,
            lag=0,
            positions={"0": 11},
            state_bytes=2048,
            uploaded_bytes=2048,
            alignment_s=0.05,
            sync_s=0.05,
            upload_s=0.05,
            commit_s=5.0,  # the commit is not part of "slowest"
        ),
    }
    return CompletedCheckpoint(7, triggered_at=1000.0, completed_at=1001.23456, acks=acks)


def test_completed_checkpoint_aggregates() -> None:
    done = _completed()
    assert done.duration_s == pytest.approx(1.23456)
    assert done.uploaded_bytes == 3072
    assert done.state_bytes == 6144
    assert done.records_in == 350
    assert done.lag == 12
    assert done.slowest_task() == "count-0"


def test_completed_checkpoint_of_no_work_sums_to_zero() -> None:
    done = CompletedCheckpoint(1, 5.0, 5.0, {"a-0": ack("a-0", 1)})
    assert done.duration_s == 0.0
    assert (done.uploaded_bytes, done.state_bytes, done.records_in, done.lag) == (0, 0, 0, 0)
    assert done.slowest_task() == "a-0"


def test_completed_checkpoint_is_frozen() -> None:
    done = _completed()
    with pytest.raises(FrozenInstanceError):
        done.checkpoint_id = 8  # type: ignore[misc]


def test_to_json_exact() -> None:
    assert _completed().to_json() == {
        "id": 7,
        "triggered_at": 1000.0,
        "completed_at": 1001.23456,
        "duration_s": 1.2346,
        "uploaded_bytes": 3072,
        "state_bytes": 6144,
        "records_in": 350,
        "tasks": {
            "count-0": {
                "worker": "w2",
                "positions": {"0": 55, "1": 66},
                "snapshot": "chk-000000000007",
                "owner": None,
                "state_bytes": 4096,
                "uploaded_bytes": 1024,
                "alignment_s": 0.1,
                "sync_s": 0.2,
                "upload_s": 0.3,
                "commit_s": 0.04,
                "records_in": 200,
                "busy_cpu_s": 0.0,
            },
            "count-1": {
                "worker": "w1",
                "positions": {"0": 11},
                "snapshot": "chk-000000000007",
                "owner": None,
                "state_bytes": 2048,
                "uploaded_bytes": 2048,
                "alignment_s": 0.05,
                "sync_s": 0.05,
                "upload_s": 0.05,
                "commit_s": 5.0,
                "records_in": 50,
                "busy_cpu_s": 0.0,
            },
            "split-0": {
                "worker": "w1",
                "positions": {"0": 1234},
                "snapshot": None,  # a stateless task has no snapshot
                "owner": None,
                "state_bytes": 0,
                "uploaded_bytes": 0,
                "alignment_s": 0.0,
                "sync_s": 0.0,
                "upload_s": 0.0,
                "commit_s": 0.02,
                "records_in": 100,
                "busy_cpu_s": 0.0,
            },
        },
    }


def test_to_json_tasks_are_sorted_and_serialisable() -> None:
    record = _completed().to_json()
    tasks = record["tasks"]
    assert isinstance(tasks, dict)
    assert list(tasks) == ["count-0", "count-1", "split-0"]
    assert json.loads(json.dumps(record)) == record


def test_to_json_of_a_coordinator_completion() -> None:
    coord = CheckpointCoordinator(["a-0", "b-0"], last_id=123_456_788)
    cid, _ = coord.trigger(1.0)
    coord.on_ack(ack("b-0", cid, state_bytes=1, records_in=3), now=2.0)
    done = coord.on_ack(ack("a-0", cid, records_in=4), now=3.5)
    assert done is not None
    record = done.to_json()
    assert record["id"] == 123_456_789
    assert record["duration_s"] == 2.5
    assert record["records_in"] == 7
    tasks = record["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["b-0"]["snapshot"] == "chk-000123456789"
    assert tasks["a-0"]["snapshot"] is None


# --- randomised model check ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_random_event_sequences_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    tasks = [f"t-{i}" for i in range(rng.randint(1, 4))]
    coord = CheckpointCoordinator(tasks, timeout_s=5.0, max_pending=3)
    now = 0.0
    triggered: list[int] = []
    acked: dict[int, set[str]] = {}
    gone: set[int] = set()  # failed or completed or subsumed: never completes again
    completed: list[int] = []
    for _ in range(400):
        now += rng.random()
        r = rng.random()
        if r < 0.15:
            cid, failed = coord.trigger(now)
            assert not triggered or cid > max(triggered)
            triggered.append(cid)
            acked[cid] = set()
            for f in failed:
                assert f.checkpoint_id == min(f.checkpoint_id, *coord.pending)
                gone.add(f.checkpoint_id)
        elif r < 0.85 and triggered:
            cid = rng.choice(triggered[-5:])
            task = rng.choice([*tasks, "stranger-0"])
            was_pending = cid in coord.pending
            done = coord.on_ack(ack(task, cid), now)
            if task in tasks and was_pending:
                acked[cid].add(task)
            if done is not None:
                assert was_pending and cid not in gone
                assert acked[cid] == set(tasks) == set(done.acks)
                assert not completed or cid > completed[-1]
                completed.append(cid)
                gone.update(c for c in triggered if c <= cid)
            else:
                assert not was_pending or acked[cid] != set(tasks)
        elif r < 0.9 and triggered:
            cid = rng.choice(triggered[-5:])
            was_pending = cid in coord.pending
            failed_one = coord.on_decline(cid, rng.choice(tasks), "r")
            assert (failed_one is not None) == was_pending
            gone.add(cid)
        else:
            for f in coord.expire(now):
                assert f.reason.startswith("timed out waiting for ")
                gone.add(f.checkpoint_id)
            assert all(now - p.triggered_at <= 5.0 for p in coord.pending.values())
        assert len(coord.pending) <= 3
        assert not (set(coord.pending) & gone)
        for p in coord.pending.values():
            assert set(p.acks) <= set(tasks)
    assert coord.last_completed is None or coord.last_completed.checkpoint_id == completed[-1]


# --- concurrency and tasks that are not running ------------------------------------------


def test_one_checkpoint_at_a_time_by_default() -> None:
    coord = CheckpointCoordinator(TASKS)
    assert coord.can_trigger and coord.newest_pending is None
    coord.trigger(0.0)
    assert not coord.can_trigger  # a slow checkpoint delays the next trigger
    assert coord.newest_pending == PendingCheckpoint(1, 0.0)  # its trigger is sent again
    ack_all(coord, 1, 1.0)
    assert coord.can_trigger


def test_max_concurrent_allows_that_many_in_flight() -> None:
    coord = CheckpointCoordinator(TASKS, max_concurrent=2)
    coord.trigger(0.0)
    assert coord.can_trigger
    coord.trigger(0.0)
    assert not coord.can_trigger
    coord.on_decline(1, "count-0", "snapshot failed")
    assert coord.can_trigger


def test_a_task_not_running_fails_the_checkpoints_it_has_not_acknowledged() -> None:
    coord = CheckpointCoordinator(TASKS, max_concurrent=3)
    coord.trigger(0.0)
    coord.trigger(0.0)
    coord.on_ack(ack("count-0", 1), 0.5)  # it acknowledged 1 before it stopped
    failed = coord.fail_waiting_on(["count-0", "elsewhere-9"])
    assert failed == [FailedCheckpoint(2, "count-0 not running")]
    assert sorted(coord.pending) == [1]
    assert coord.fail_waiting_on([]) == []
    assert coord.fail_waiting_on(["count-1", "split-0"]) == [
        FailedCheckpoint(1, "count-1, split-0 not running")
    ]
    assert coord.can_trigger
