"""The pure parts of the chaos run's broker faults (tests/broker_faults.py): Kafka's
transaction coordinator lookup, the fault plan and the recovery times."""

from __future__ import annotations

import random

import pytest

from processor.models import control
from tests.broker_faults import (
    CONTROLLER_KILL,
    FAULTS,
    TXN_LEADER_KILL,
    FaultRecord,
    java_string_hash,
    plan,
    recovery,
    transaction_partition,
)
from tests.integration.harness import ControlLog


def test_java_string_hash_is_javas() -> None:
    # Printed by Java 17's String.hashCode: "é" is one UTF-16 code unit, an emoji two (a
    # surrogate pair), and long ids wrap around as Java ints do.
    assert java_string_hash("é") == 233
    assert java_string_hash("\U0001f600") == 1772899
    assert java_string_hash("it-b8f185d3.count-6") == -1640615655
    assert java_string_hash("a" * 20) == 1542361408
    assert java_string_hash("probe.count-0") == 1010988724


def test_transaction_partition_follows_kafkas_abs() -> None:
    # Integer.MIN_VALUE has no positive abs: Kafka's Utils.abs makes it 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert transaction_partition("polygenelubricants", 7) == 0
    assert transaction_partition("it-b8f185d3.count-6", 10) == 1640615655 % 10


def test_plan_gives_each_kind_in_turn_and_at_least_one() -> None:
    assert list(plan(random.Random(1), 3, [TXN_LEADER_KILL]).values()) == [TXN_LEADER_KILL]
    kinds = list(FAULTS)
    slots = plan(random.Random(1), 60, kinds)
    assert len(slots) == 18 and all(0 <= n < 60 for n in slots)
    ordered = [slots[n] for n in sorted(slots)]
    assert ordered[: len(kinds)] == kinds  # each kind once before any twice
    assert plan(random.Random(1), 5, []) == {}
    with pytest.raises(ValueError, match="unknown cluster fault"):
        plan(random.Random(1), 5, ["broker on fire"])


def _ack(task: str, checkpoint: int) -> control.Ack:
    return control.Ack(task, checkpoint, "worker-0", 0, 0, 0, {})


def test_recovery_waits_for_every_task_to_commit_a_checkpoint_begun_after_the_fault() -> None:
    tasks = {"split-0": "worker-0", "count-0": "worker-1"}
    messages: ControlLog = [
        (1.0, control.Assignment(1, 1, tasks)),
        (9.0, control.Trigger(5, 9.0)),
        (10.5, _ack("split-0", 5)),  # committed while the fault (at 10) begins: not it
        (10.6, _ack("count-0", 5)),
        (12.0, control.Trigger(6, 12.0)),
        (13.0, _ack("split-0", 6)),
        (17.5, _ack("count-0", 7)),
    ]
    records = [FaultRecord(TXN_LEADER_KILL, 10.0, 1), FaultRecord(CONTROLLER_KILL, 20.0, 2)]
    # The controller kill's checkpoint never came: left out rather than counted as zero.
    assert recovery(messages, records) == {TXN_LEADER_KILL: [7.5]}


def test_recovery_skips_a_fault_under_an_empty_assignment() -> None:
    # A coordinator just restarted may publish an assignment without tasks: nothing to wait for.
    messages: ControlLog = [
        (1.0, control.Assignment(1, 1, {})),
        (12.0, control.Trigger(6, 12.0)),
    ]
    assert recovery(messages, [FaultRecord(TXN_LEADER_KILL, 10.0, 1)]) == {}


def test_a_worker_cut_moved_when_an_assignment_after_it_leaves_the_worker_out() -> None:
    from tests.network_faults import BROKER_CUT, WORKER_CUT, worker_moves

    holding = {"count-0": "worker-1", "count-1": "worker-0"}
    moved = {"count-0": "worker-0", "count-1": "worker-0"}
    messages: ControlLog = [
        (1.0, control.Assignment(1, 1, dict(moved))),  # before the cut: not counted
        (10.0, control.Assignment(2, 1, dict(holding))),
        (17.5, control.Assignment(3, 1, dict(holding))),  # still has worker-1
        (19.0, control.Assignment(4, 1, dict(moved))),
    ]
    cut = FaultRecord(WORKER_CUT, 12.0, -2)  # worker 1
    never = FaultRecord(WORKER_CUT, 20.0, -2)
    broker = FaultRecord(BROKER_CUT, 12.0, 1)
    worker_moves(messages, [cut, never, broker])
    assert cut.moved_s == 7.0
    assert never.moved_s is None and broker.moved_s is None
