"""The coordinator's state machine (`processor.coordinator.machine`): messages and ticks in,
steps out, with no Kafka."""

from __future__ import annotations

import doctest

from processor.coordinator import machine as machine_module
from processor.coordinator.machine import CoordinatorMachine, JobFacts, Times
from processor.models.control import Ack, Assignment, Decline, Heartbeat, TaskStatus, Trigger

TASKS = ["source-0", "count-0"]
TIMES = Times(heartbeat_s=1.0, interval_s=1.0, checkpoint_timeout_s=60.0, worker_timeout_s=5.0)


def _machine(expected_workers: int = 1) -> CoordinatorMachine:
    job = JobFacts(TASKS, {"source": 1, "count": 1}, 1, "c1", expected_workers)
    return CoordinatorMachine(job, TIMES, last_id=0, now=0.0, generation=100)


def _beat(worker: str, state: str = "running", reason: str = "") -> Heartbeat:
    return Heartbeat(worker, f"{worker}-i", {t: TaskStatus(state, 0, reason) for t in TASKS})


def _ack(task: str, checkpoint: int, records: int = 0, lag: int = 0) -> Ack:
    return Ack(task, checkpoint, "w0", records, records, lag, {})


def _running(m: CoordinatorMachine) -> int:
    """Heartbeats until the first checkpoint is triggered; returns its id."""
    m.on_message(_beat("w0"), 0.5, 1000.5)
    m.tick(2.0, 1002.0)  # the first assignment
    step = m.tick(3.0, 1003.0)
    triggers = [msg for msg in step.send if isinstance(msg, Trigger)]
    assert len(triggers) == 1
    return triggers[0].checkpoint


def test_the_docstring_runs() -> None:
    assert doctest.testmod(machine_module, raise_on_error=False).failed == 0


def test_the_first_assignment_waits_for_the_expected_workers_a_while() -> None:
    m = _machine(expected_workers=2)
    m.on_message(_beat("w0"), 0.5, 1000.5)
    assert m.tick(2.0, 1002.0).send == []  # one of two workers, still waiting
    m.on_message(_beat("w1"), 2.5, 1002.5)
    step = m.tick(3.0, 1003.0)
    assert step.assigned and type(step.send[0]) is Assignment
    assert set(m.placement.values()) == {"w0", "w1"}


def test_acks_of_every_task_complete_the_checkpoint_and_quiet_ones_make_it_idle() -> None:
    m = _machine()
    checkpoint = _running(m)
    assert m.on_message(_ack("source-0", checkpoint), 3.1, 1003.1).completed == []
    step = m.on_message(_ack("count-0", checkpoint, lag=4), 3.2, 1003.2)
    assert [c.checkpoint_id for c in step.completed] == [checkpoint]
    assert m.lag == {"source-0": 0, "count-0": 4} and not m.idle
    for n in range(checkpoint + 1, checkpoint + 4):
        m.on_message(_beat("w0"), 3.0 + n, 1003.0 + n)
        m.tick(3.0 + n, 1003.0 + n)
        for task in TASKS:
            m.on_message(_ack(task, n), 3.5 + n, 1003.5 + n)
    assert m.idle


def test_an_ack_of_an_unknown_task_or_id_is_not_accepted() -> None:
    m = _machine()
    checkpoint = _running(m)
    assert not m.on_message(_ack("other-0", checkpoint), 3.1, 1003.1).accepted
    beyond = m.checkpoints.ceiling + 1
    assert not m.on_message(_ack("count-0", beyond), 3.1, 1003.1).accepted
    assert not m.on_message(Decline("other-0", checkpoint, "no"), 3.1, 1003.1).accepted


def test_a_decline_fails_the_checkpoint() -> None:
    m = _machine()
    checkpoint = _running(m)
    step = m.on_message(Decline("count-0", checkpoint, "disk full"), 3.1, 1003.1)
    assert [(f.checkpoint_id, repeated) for f, repeated in step.failed] == [(checkpoint, False)]


def test_a_stopped_task_is_reported_and_fails_the_next_checkpoint_at_once() -> None:
    m = _machine()
    _running(m)
    step = m.on_message(_beat("w0", "stopped", "bad record"), 3.1, 1003.1)
    assert step.stopped is not None and step.stopped[1] == "bad record"
    # The pending checkpoint fails (its tasks do not run), the next one at its trigger.
    failed = [(f.checkpoint_id, f.reason, repeated) for f, repeated in m.tick(4.0, 1004.0).failed]
    assert failed == [
        (1, "count-0, source-0 not running", True),
        (2, "declined by count-0: stopped: bad record", True),
    ]


def test_a_worker_that_misses_its_heartbeats_loses_its_tasks() -> None:
    m = _machine()
    m.on_message(_beat("w0"), 0.5, 1000.5)
    m.on_message(_beat("w1"), 0.5, 1000.5)
    m.tick(2.0, 1002.0)
    step = m.tick(7.0, 1007.0)
    assert sorted(step.dead) == ["w0", "w1"] and step.assigned and m.placement == {}
    m.on_message(_beat("w1"), 7.5, 1007.5)
    assert m.tick(8.5, 1008.5).assigned and set(m.placement.values()) == {"w1"}


def test_a_drain_ends_event_time_in_every_trigger_and_needs_idle_again() -> None:
    """``processor local --until-idle --drain``: once idle, the triggers carry ``drain`` (the
    sources end event time), and the job is idle again only after more quiet checkpoints."""
    m = _machine()
    checkpoint = _running(m)
    at = 3.0

    def quiet_checkpoint(n: int) -> list[Trigger]:
        nonlocal at
        at += 1.5
        m.on_message(_beat("w0"), at, 1000 + at)
        sent = [t for t in m.tick(at, 1000 + at).send if isinstance(t, Trigger)]
        for task in TASKS:
            m.on_message(_ack(task, n), at + 0.1, 1000.1 + at)
        return sent

    for task in TASKS:
        m.on_message(_ack(task, checkpoint), 3.1, 1003.1)
    triggers = [t for n in range(checkpoint + 1, checkpoint + 3) for t in quiet_checkpoint(n)]
    assert m.idle and not any(t.drain for t in triggers)
    m.drain()
    assert m.draining and not m.idle
    after = [t for n in range(checkpoint + 3, checkpoint + 6) for t in quiet_checkpoint(n)]
    assert after and all(t.drain for t in after)
    assert m.idle
