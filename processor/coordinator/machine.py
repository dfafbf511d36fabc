"""The coordinator's decisions as a pure state machine: control messages and clock ticks in,
what to do out. No I/O: `CoordinatorService` reads the control topic, feeds each message and
a tick per loop turn, and carries out the `Step` it gets back (sends, records, logs,
metrics, the status page).

It places tasks on live workers (`assign`), triggers checkpoints on its schedule and once
every task runs, and completes or fails them from the tasks' acks and declines
(`CheckpointCoordinator`). Restarted, it learns placement from heartbeats and checkpoint ids
from the history it is given and from the tasks.

>>> from processor.models.control import Heartbeat, TaskStatus
>>> times = Times(heartbeat_s=1.0, interval_s=1.0, checkpoint_timeout_s=60.0, worker_timeout_s=5.0)
>>> job = JobFacts(["count-0"], {"count": 1}, 1, "c1", expected_workers=1)
>>> machine = CoordinatorMachine(job, times, last_id=0, now=0.0, generation=100)
>>> beat = Heartbeat("w0", "i0", {"count-0": TaskStatus("running", 0)})
>>> machine.on_message(beat, now=0.5, wall=1000.5).accepted
True
>>> step = machine.tick(now=2.0, wall=1002.0)  # the first assignment is due
>>> [type(m).__name__ for m in step.send], machine.placement
(['Assignment'], {'count-0': 'w0'})
>>> [type(m).__name__ for m in machine.tick(now=3.0, wall=1003.0).send]
['Assignment', 'Trigger']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.checkpointing.coordinator import (
    CheckpointCoordinator,
    CompletedCheckpoint,
    FailedCheckpoint,
)
from processor.checkpointing.schedule import TriggerSchedule
from processor.coordinator.reports import TaskReports
from processor.jobs.assignment import WorkerRegistry, assign
from processor.models import control

# Before the first assignment, workers that run already announce themselves (heartbeats).
ANNOUNCE_HEARTBEATS = 2
# How long the first assignment waits for the expected workers at most, and the first
# trigger (after the first assignment's interval) for every task to run.
EXPECTED_WAIT_S = 10.0
FIRST_TRIGGER_WAIT_S = 15.0
IDLE_CHECKPOINTS = 3  # completed checkpoints in a row without input or lag: the job is idle


@dataclass(frozen=True)
class Times:
    """The coordinator's periods and timeouts, in seconds."""

    heartbeat_s: float
    interval_s: float
    checkpoint_timeout_s: float
    worker_timeout_s: float
    max_concurrent: int = 1


@dataclass(frozen=True)
class JobFacts:
    """What the coordinator runs: the job's tasks and stage sizes, the input's partitions,
    the coordinator's own incarnation, and how many workers to wait for at first."""

    tasks: list[str]
    parallelism: dict[str, int]
    input_partitions: int
    incarnation: str
    expected_workers: int = 1


@dataclass
class Step:
    """What a message or a tick asks the service to do."""

    accepted: bool = True  # False: a message not of this job, or for an id out of range
    send: list[control.Message] = field(default_factory=list)  # onto the control topic
    completed: list[CompletedCheckpoint] = field(default_factory=list)  # to record
    # Failed checkpoints; ``True``: one more for a reason that lasts (logged once a while).
    failed: list[tuple[FailedCheckpoint, bool]] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)  # workers that missed their heartbeats
    assigned: bool = False  # a new assignment (generation, placement) to log
    published: bool = False  # the assignment went out again: the status page is due
    stopped: tuple[str, str] | None = None  # a task stopped on a failing record, and why


class CoordinatorMachine:
    """Placement, checkpoints and what the tasks report; see the module's docstring."""

    def __init__(
        self, job: JobFacts, times: Times, last_id: int, now: float, generation: int
    ) -> None:
        self.job = job
        self.times = times
        self.checkpoints = CheckpointCoordinator(
            job.tasks, last_id, times.checkpoint_timeout_s, max_concurrent=times.max_concurrent
        )
        self.registry = WorkerRegistry(times.worker_timeout_s)
        self.reports = TaskReports()
        self.placement: dict[str, str] = {}
        # Above any earlier coordinator's generations (the caller's clock, in ms).
        self.generation = self._first_generation = generation
        self.lag: dict[str, int] = {}  # each task's, at its last ack
        self.watermarks: dict[str, int] = {}  # event time, ms, of timed jobs' tasks
        self.idle_streak = 0
        self.draining = False  # every trigger from now on ends event time (`drain`)
        self._changed = True
        # The first trigger waits until every task runs (or a while at most): a checkpoint
        # triggered before a source is up can only fail.
        self._seen_running: set[str] = set()
        self._next_assign = now + ANNOUNCE_HEARTBEATS * times.heartbeat_s
        # A first assignment before the expected workers are up would move half the tasks
        # again a moment later: wait for them, a while at most.
        self._expected_by = now + EXPECTED_WAIT_S
        self.schedule = TriggerSchedule(
            times.interval_s, next_trigger=self._next_assign + times.interval_s
        )
        self._first_trigger_by = self.schedule.next_trigger + FIRST_TRIGGER_WAIT_S

    @property
    def idle(self) -> bool:
        """Every input consumed and committed, checkpoint after checkpoint."""
        return self.idle_streak >= IDLE_CHECKPOINTS

    def drain(self) -> None:
        """The input is done: every trigger from now on tells the sources to end event time
        (every window and timer fires), and the job must be idle again, after that, to be
        done."""
        self.draining = True
        self.idle_streak = 0

    def on_message(self, message: control.Message, now: float, wall: float) -> Step:
        """A control message read at ``now`` (monotonic) and ``wall`` (epoch seconds)."""
        if isinstance(message, control.Heartbeat):
            return self._heartbeat(message, now)
        if isinstance(message, control.Ack):
            return self._ack(message, wall)
        if isinstance(message, control.Decline):
            return self._decline(message)
        return Step()  # an endpoint, or another coordinator's own messages

    def _heartbeat(self, message: control.Heartbeat, now: float) -> Step:
        worker, incarnation = message.worker, message.incarnation
        restarted = self.registry.is_restart(worker, incarnation)
        if self.registry.heartbeat(worker, incarnation, now):
            self._changed = True
        self.reports.heard(worker, restarted, message.tasks)
        # Its liveness counts; an id above the history is not learnt.
        step = Step(all([self.checkpoints.observe(t.checkpoint) for t in message.tasks.values()]))
        for task, status in message.tasks.items():
            if task not in self.checkpoints.tasks:
                continue  # not a task of this job
            if status.state == "running":
                self._seen_running.add(task)
            given_up = status.state in ("failed", "stopped")
            if task not in self.placement and not given_up:
                self.placement[task] = worker  # adopt what already runs
            if status.state == "stopped" and status.reason and step.stopped is None:
                step.stopped = (task, status.reason)
        return step

    def _known(self, task: str, checkpoint_id: int) -> bool:
        """An ack or decline of a task of the job, for an id its history allows."""
        return task in self.checkpoints.tasks and self.checkpoints.plausible(checkpoint_id)

    def _ack(self, message: control.Ack, wall: float) -> Step:
        if not self._known(message.task, message.checkpoint):
            return Step(accepted=False)
        self.lag[message.task] = message.lag
        if message.watermark_ms is not None:
            self.watermarks[message.task] = message.watermark_ms
        step = Step()
        done = self.checkpoints.on_ack(message, wall)
        if done is not None:
            step.completed.append(done)
            quiet = done.records_in == 0 and done.lag == 0
            self.idle_streak = self.idle_streak + 1 if quiet else 0
        return step

    def _decline(self, message: control.Decline) -> Step:
        if not self._known(message.task, message.checkpoint):
            return Step(accepted=False)
        step = Step()
        failed = self.checkpoints.on_decline(message.checkpoint, message.task, message.reason)
        if failed is not None:
            step.failed.append((failed, False))
        return step

    def tick(self, now: float, wall: float) -> Step:
        """A turn of the loop at ``now`` (monotonic) and ``wall`` (epoch seconds): workers
        expired, the assignment sent (again), checkpoints failed, triggered or expired."""
        step = Step()
        step.dead = self.registry.expire(now)
        if step.dead:
            self._changed = True
        if now >= self._next_assign and not self._waiting_for_workers(now):
            self._assign(step)
            self._next_assign = now + self.times.heartbeat_s
        tasks = self.job.tasks
        not_running = self.reports.not_running(tasks, self.placement, self.registry.alive)
        for failed in self.checkpoints.fail_waiting_on(not_running):
            step.failed.append((failed, True))
        self._trigger(step, now, wall)
        step.failed.extend((failed, False) for failed in self.checkpoints.expire(wall))
        return step

    def _waiting_for_workers(self, now: float) -> bool:
        """Before the first assignment, while fewer workers than expected are up."""
        return (
            self.generation == self._first_generation
            and len(self.registry.alive) < self.job.expected_workers
            and now < self._expected_by
        )

    def _assign(self, step: Step) -> None:
        """The assignment (a new one if workers came or went), sent every heartbeat."""
        if self._changed:
            self.placement = assign(self.job.tasks, self.registry.alive, self.placement)
            self.generation += 1
            self._changed = False
            step.assigned = True
        job = self.job
        step.send.append(
            control.Assignment(
                self.generation,
                job.input_partitions,
                self.placement,
                job.incarnation,
                dict(job.parallelism),
            )
        )
        step.published = True

    def _trigger(self, step: Step, now: float, wall: float) -> None:
        """A pending checkpoint's trigger again, and a new checkpoint when one is due."""
        checkpoints = self.checkpoints
        pending = checkpoints.newest_pending
        if self.schedule.resend_due(now, pending is not None):
            assert pending is not None
            # Again, while it is pending: a source task that started after the trigger went
            # out, or whose barrier was aborted with its fenced predecessor's transaction,
            # acts on it now (one that did already ignores it). With one checkpoint at a
            # time, a lost trigger would otherwise hold every later one back until the
            # timeout.
            again = control.Trigger(
                pending.checkpoint_id, pending.triggered_at, drain=self.draining
            )
            step.send.append(again)
        ready = len(self._seen_running) == len(self.job.tasks) or now >= self._first_trigger_by
        due = self.schedule.trigger_due(now)
        if not (due and self.placement and ready and checkpoints.can_trigger):
            return
        checkpoint_id, dropped = checkpoints.trigger(wall)
        step.send.append(control.Trigger(checkpoint_id, wall, drain=self.draining))
        step.failed.extend((failed, False) for failed in dropped)
        stopped = self.reports.given_up()
        if stopped is not None:
            # It will never acknowledge: fail the checkpoint now, not at its timeout. The
            # other tasks commit their part of it all the same.
            failed = checkpoints.on_decline(checkpoint_id, *stopped)
            if failed is not None:
                step.failed.append((failed, True))
        self.schedule.triggered(now)
