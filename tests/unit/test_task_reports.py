"""What the coordinator knows of each task from the heartbeats, and a worker restarted under
its id (processor/coordinator/reports.py). No I/O."""

from __future__ import annotations

from processor.checkpointing.coordinator import CheckpointCoordinator, FailedCheckpoint
from processor.coordinator.reports import TaskReport, TaskReports
from processor.jobs.assignment import WorkerRegistry
from processor.models.control import Ack, TaskStatus

TASKS = ["split-0", "split-1", "count-0"]
PLACEMENT = {"split-0": "w0", "split-1": "w1", "count-0": "w1"}
RUNNING = TaskStatus("running", 4)


def _ack(task: str, checkpoint: int) -> Ack:
    return Ack(
        task=task,
        checkpoint=checkpoint,
        worker="w",
        records_in=0,
        records_out=0,
        lag=0,
        positions={},
    )


def test_tasks_reported_running_by_their_live_worker_are_running() -> None:
    reports = TaskReports()
    reports.heard("w0", False, {"split-0": RUNNING})
    reports.heard("w1", False, {"split-1": RUNNING, "count-0": TaskStatus("starting", 0)})
    assert reports.not_running(TASKS, PLACEMENT, ["w0", "w1"]) == {"count-0"}
    assert reports.reports["split-1"] == TaskReport("w1", "running", 4, "")


def test_a_task_is_not_running_on_a_dead_worker_unreported_or_reported_by_another() -> None:
    reports = TaskReports()
    reports.heard("w0", False, {"split-0": RUNNING, "split-1": RUNNING})  # split-1 moved to w1
    assert reports.not_running(TASKS, PLACEMENT, ["w0", "w1"]) == {"split-1", "count-0"}
    assert reports.not_running(TASKS, PLACEMENT, ["w1"]) == set(TASKS)
    assert reports.not_running(TASKS, {}, ["w0", "w1"]) == set(TASKS)  # placed nowhere


def test_a_restarted_worker_voids_what_its_old_process_said() -> None:
    reports = TaskReports()
    reports.heard("w0", False, {"split-0": RUNNING})
    reports.heard("w1", False, {"split-1": RUNNING, "count-0": RUNNING})
    reports.heard("w1", True, {})  # the new process's first heartbeat: no task started yet
    assert reports.not_running(TASKS, PLACEMENT, ["w0", "w1"]) == {"split-1", "count-0"}
    assert set(reports.reports) == {"split-0"}
    reports.heard("w1", False, {"split-1": RUNNING, "count-0": RUNNING})
    assert reports.not_running(TASKS, PLACEMENT, ["w0", "w1"]) == set()


def test_a_heartbeat_that_is_no_restart_forgets_nothing() -> None:
    reports = TaskReports()
    reports.heard("w1", False, {"split-1": RUNNING, "count-0": RUNNING})
    reports.heard("w1", False, {})
    assert set(reports.reports) == {"split-1", "count-0"}


def test_given_up_names_a_task_failed_for_good_or_stopped() -> None:
    reports = TaskReports()
    reports.heard("w0", False, {"split-0": TaskStatus("failed", 3)})  # failed, to be retried
    assert reports.given_up() is None
    reports.heard("w1", False, {"count-0": TaskStatus("stopped", 3, "bad record")})
    assert reports.given_up() == ("count-0", "stopped: bad record")
    reports.heard("w0", False, {"split-0": TaskStatus("failed", 3, "no table")})
    assert reports.given_up() == ("count-0", "stopped: bad record")  # the first by name
    reports.heard("w1", True, {})
    assert reports.given_up() == ("split-0", "failed for good: no table")


def test_a_worker_restarted_between_its_commit_and_its_ack_fails_the_checkpoint_at_once() -> None:
    """The coordinator's sequence (runtime/coordinator.py): w0's process commits a checkpoint
    and dies before its acknowledgement; a supervisor restarts it under the same id before its
    heartbeat timeout. Its task restores at that checkpoint and will never acknowledge it:
    the checkpoint fails at the new process's first heartbeat, not a minute later."""
    registry = WorkerRegistry(timeout_s=3.0)
    reports = TaskReports()
    checkpoints = CheckpointCoordinator(TASKS, timeout_s=60)

    def heartbeat(worker: str, incarnation: str, now: float, tasks: dict[str, TaskStatus]) -> None:
        restarted = registry.is_restart(worker, incarnation)
        registry.heartbeat(worker, incarnation, now)
        reports.heard(worker, restarted, tasks)

    def failed_now() -> list[FailedCheckpoint]:
        return checkpoints.fail_waiting_on(reports.not_running(TASKS, PLACEMENT, registry.alive))

    heartbeat("w0", "a", 0.0, {"split-0": RUNNING})
    heartbeat("w1", "b", 0.0, {"split-1": RUNNING, "count-0": RUNNING})
    first, _ = checkpoints.trigger(0.5)
    for task in TASKS:
        checkpoints.on_ack(_ack(task, first), 0.7)
    checkpoint, _ = checkpoints.trigger(1.0)
    checkpoints.on_ack(_ack("split-1", checkpoint), 1.1)
    checkpoints.on_ack(_ack("count-0", checkpoint), 1.2)
    # w0 committed it and died before its ack; its new process's first heartbeat, 1 s later:
    assert failed_now() == []
    heartbeat("w0", "a2", 2.0, {})
    assert failed_now() == [FailedCheckpoint(checkpoint, "split-0 not running")]
    assert checkpoints.can_trigger
    # Its task restored and runs: the next checkpoint completes.
    heartbeat("w0", "a2", 2.3, {"split-0": TaskStatus("running", checkpoint)})
    assert failed_now() == []
    nxt, _ = checkpoints.trigger(2.4)
    done = [checkpoints.on_ack(_ack(task, nxt), 2.6) for task in TASKS]
    assert done[-1] is not None and done[-1].checkpoint_id == nxt
