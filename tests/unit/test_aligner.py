"""The alignment state machine: hand-written interleavings, then a randomised model check."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from processor.checkpointing.aligner import (
    BarrierAligner,
    BarrierHandler,
    BarrierOutcome,
    Channel,
    Verdict,
    resume_offsets,
)
from processor.checkpointing.tracker import BarrierTracker
from processor.checkpointing.unaligned import UnalignedTracker

A: Channel = (0, 0)
B: Channel = (0, 1)


def test_single_channel_completes_on_every_barrier() -> None:
    aligner = BarrierAligner([A])
    assert aligner.admit(A, 0) is Verdict.PROCESS
    outcome = aligner.on_barrier(A, 1, 1)
    assert outcome.completed == 1 and outcome.positions == {A: 1} and not outcome.seeks
    assert aligner.admit(A, 2) is Verdict.PROCESS
    assert aligner.resume_offsets() == {0: 2}


def test_two_channels_hold_the_aligned_one_and_seek_back() -> None:
    aligner = BarrierAligner([A, B])
    # offsets: 0 A-data, 1 A-barrier(1), 2 A-data (held), 3 B-data, 4 B-barrier(1)
    assert aligner.admit(A, 0) is Verdict.PROCESS
    assert aligner.on_barrier(A, 1, 1).is_noop
    assert aligner.admit(A, 2) is Verdict.HOLD
    assert aligner.admit(B, 3) is Verdict.PROCESS
    outcome = aligner.on_barrier(B, 1, 4)
    assert outcome.completed == 1
    assert outcome.positions == {A: 1, B: 4}
    assert outcome.seeks == {0: 2}
    # The re-read: offset 2 is now processed, 3 and 4 were already consumed.
    assert aligner.admit(A, 2) is Verdict.PROCESS
    assert aligner.admit(B, 3) is Verdict.SKIP
    assert aligner.on_barrier(B, 1, 4).is_noop
    # A snapshot at barrier 1 resumes at the earliest barrier + 1.
    assert aligner.resume_offsets() == {0: 2}


def test_restored_positions_skip_what_the_snapshot_holds() -> None:
    aligner = BarrierAligner([A, B], positions={A: 1, B: 4}, last_completed=1)
    assert aligner.resume_offsets() == {0: 2}
    assert aligner.admit(A, 2) is Verdict.PROCESS
    assert aligner.admit(B, 3) is Verdict.SKIP
    assert aligner.on_barrier(B, 1, 4).is_noop
    assert aligner.admit(B, 5) is Verdict.PROCESS


def test_barriers_of_several_checkpoints_in_flight() -> None:
    aligner = BarrierAligner([A, B])
    # A races ahead with barriers 1 and 2 before B's barrier 1.
    assert aligner.on_barrier(A, 1, 0).is_noop
    assert aligner.admit(A, 1) is Verdict.HOLD
    assert aligner.on_barrier(A, 2, 2).is_noop  # held: read again after alignment 1
    assert aligner.admit(B, 3) is Verdict.PROCESS
    first = aligner.on_barrier(B, 1, 4)
    assert first.completed == 1 and first.seeks == {0: 1}
    assert aligner.admit(A, 1) is Verdict.PROCESS
    assert aligner.on_barrier(A, 2, 2).is_noop  # alignment 2 starts, A held again
    assert aligner.pending == 2
    assert aligner.admit(B, 3) is Verdict.SKIP
    assert aligner.on_barrier(B, 1, 4).is_noop
    second = aligner.on_barrier(B, 2, 5)
    assert second.completed == 2 and second.positions == {A: 2, B: 5}


def test_barrier_id_jump_after_upstream_recovery_aborts_the_pending_checkpoint() -> None:
    aligner = BarrierAligner([A, B], last_completed=4)
    assert aligner.on_barrier(A, 5, 0).is_noop
    assert aligner.admit(A, 1) is Verdict.HOLD
    assert aligner.admit(B, 2) is Verdict.PROCESS
    # B's upstream recovered and never saw checkpoint 5: its next barrier is 7.
    jump = aligner.on_barrier(B, 7, 3)
    assert jump.aborted == 5 and jump.completed is None and jump.seeks == {0: 1}
    assert aligner.pending == 7
    # Re-read: A's held record is processed now, B's earlier record and barrier are not.
    assert aligner.admit(A, 1) is Verdict.PROCESS
    assert aligner.admit(B, 2) is Verdict.SKIP
    assert aligner.on_barrier(B, 7, 3).is_noop
    # A's barrier 6 is a straggler of a checkpoint that can no longer complete.
    assert aligner.on_barrier(A, 6, 4).is_noop
    done = aligner.on_barrier(A, 7, 5)
    assert done.completed == 7 and done.positions == {A: 5, B: 3}


def test_stale_barrier_after_completion_is_ignored() -> None:
    aligner = BarrierAligner([A], last_completed=9)
    assert aligner.on_barrier(A, 9, 0).is_noop
    assert aligner.on_barrier(A, 10, 1).completed == 10


def test_unknown_channel_is_rejected() -> None:
    aligner = BarrierAligner([A])
    with pytest.raises(ValueError, match="unknown channel"):
        aligner.on_barrier((3, 3), 1, 0)


def test_no_channels_is_rejected() -> None:
    with pytest.raises(ValueError):
        BarrierAligner([])


# --- model check -----------------------------------------------------------------------------


@dataclass
class Entry:
    channel: Channel
    barrier: int | None = None  # checkpoint id, or None for a data record
    record: int = -1  # unique id of a data record


@dataclass
class Scenario:
    logs: dict[int, list[Entry]]
    # (channel, checkpoint) -> records the channel sent before that barrier
    before: dict[tuple[Channel, int], set[int]] = field(default_factory=dict)
    records: set[int] = field(default_factory=set)


def make_scenario(rng: random.Random, partitions: int, upstreams: int) -> Scenario:
    logs: dict[int, list[Entry]] = {p: [] for p in range(partitions)}
    scenario = Scenario(logs)
    sent: dict[Channel, set[int]] = {
        (p, u): set() for p in range(partitions) for u in range(upstreams)
    }
    next_barrier = dict.fromkeys(range(upstreams), 1)
    next_record = 0
    final = 40
    for _ in range(rng.randint(20, 200)):
        u = rng.randrange(upstreams)
        if rng.random() < 0.15 and next_barrier[u] < final - 3:
            # An upstream sometimes skips checkpoint ids, as after its own recovery.
            cid = next_barrier[u] + (rng.randint(1, 3) if rng.random() < 0.2 else 0)
            next_barrier[u] = cid + 1
            for p in range(partitions):
                logs[p].append(Entry((p, u), barrier=cid))
                scenario.before[((p, u), cid)] = set(sent[(p, u)])
        else:
            p = rng.randrange(partitions)
            logs[p].append(Entry((p, u), record=next_record))
            sent[(p, u)].add(next_record)
            scenario.records.add(next_record)
            next_record += 1
    for u in range(upstreams):  # a final common barrier, so that everything completes
        for p in range(partitions):
            logs[p].append(Entry((p, u), barrier=final))
            scenario.before[((p, u), final)] = set(sent[(p, u)])
    return scenario


SnapshotCheck = Callable[[Scenario, Counter[int], BarrierOutcome, set[Channel]], None]


def run_model(
    scenario: Scenario,
    rng: random.Random,
    crash_rate: float,
    handler_type: type[BarrierHandler],
    check: SnapshotCheck,
    exactly_once: bool = True,
) -> Counter[int]:
    """One task reading the scenario's partitions in a random interleaving, crashing now and
    then (restore the last snapshot, rewind to its resume offsets). Returns how often each
    record went into the final state; ``check`` judges every snapshot."""
    channels = {e.channel for log in scenario.logs.values() for e in log}
    handler = handler_type(channels)
    state: Counter[int] = Counter()
    snapshot: tuple[Counter[int], dict[Channel, int], int] = (Counter(), handler.positions, 0)
    offsets = dict.fromkeys(scenario.logs, 0)
    steps = crashes = 0
    while any(offsets[p] < len(log) for p, log in scenario.logs.items()):
        steps += 1
        assert steps < 100_000, "no progress"
        if crashes < 5 and rng.random() < crash_rate:
            crashes += 1
            saved_state, saved_pos, saved_id = snapshot
            state = Counter(saved_state)
            handler = handler_type(channels, saved_pos, saved_id)
            offsets.update(handler.resume_offsets())
            continue
        p = rng.choice([q for q, log in scenario.logs.items() if offsets[q] < len(log)])
        offset = offsets[p]
        entry = scenario.logs[p][offset]
        offsets[p] = offset + 1
        if entry.barrier is None:
            if handler.admit(entry.channel, offset) is Verdict.PROCESS:
                assert not (exactly_once and state[entry.record]), "processed twice"
                state[entry.record] += 1
            continue
        outcome = handler.on_barrier(entry.channel, entry.barrier, offset)
        if outcome.completed is not None:
            check(scenario, state, outcome, channels)
            # The offset the task commits with the snapshot is where a restore of it resumes.
            assert handler.resume_offsets() == resume_offsets(outcome.positions)
            snapshot = (Counter(state), dict(outcome.positions), outcome.completed)
        for part, seek_to in outcome.seeks.items():
            assert seek_to < offsets[part]
            offsets[part] = seek_to
    return state


def _cut(scenario: Scenario, checkpoint: int, channels: set[Channel]) -> set[int]:
    """The records every channel sent before barrier ``checkpoint``."""
    return set().union(*(scenario.before[(c, checkpoint)] for c in channels))


def is_the_cut(
    scenario: Scenario, state: Counter[int], outcome: BarrierOutcome, channels: set[Channel]
) -> None:
    assert outcome.completed is not None
    cut = _cut(scenario, outcome.completed, channels)
    assert set(state) == cut, f"snapshot {outcome.completed} is not the cut"


def run_task(scenario: Scenario, rng: random.Random, crash_rate: float) -> set[int]:
    return set(run_model(scenario, rng, crash_rate, BarrierAligner, is_the_cut))


@pytest.mark.parametrize("seed", range(300))
def test_model_every_record_exactly_once_and_snapshots_are_cuts(seed: int) -> None:
    rng = random.Random(seed)
    scenario = make_scenario(rng, partitions=rng.randint(1, 3), upstreams=rng.randint(1, 4))
    final = run_task(scenario, rng, crash_rate=0.0 if seed % 3 == 0 else 0.02)
    assert final == scenario.records


# --- at-least-once: the tracker ----------------------------------------------------------------


def holds_the_cut(
    scenario: Scenario, state: Counter[int], outcome: BarrierOutcome, channels: set[Channel]
) -> None:
    assert not outcome.seeks, "the tracker never holds anything back"
    assert outcome.completed is not None
    cut = _cut(scenario, outcome.completed, channels)
    assert cut <= set(state), f"snapshot {outcome.completed} misses records of its cut"


def run_tracker(scenario: Scenario, rng: random.Random, crash_rate: float) -> Counter[int]:
    return run_model(scenario, rng, crash_rate, BarrierTracker, holds_the_cut, exactly_once=False)


@pytest.mark.parametrize("seed", range(300))
def test_tracker_model_every_record_at_least_once_and_once_without_failures(seed: int) -> None:
    rng = random.Random(seed)
    scenario = make_scenario(rng, partitions=rng.randint(1, 3), upstreams=rng.randint(1, 4))
    crashes = seed % 3 != 0
    final = run_tracker(scenario, rng, crash_rate=0.02 if crashes else 0.0)
    assert set(final) == scenario.records  # nothing lost
    if not crashes:
        assert set(final.values()) <= {1}  # without a failure, nothing counts twice


def test_tracker_completes_with_a_channel_ahead_by_several_checkpoints() -> None:
    a, b = (0, 0), (0, 1)
    tracker = BarrierTracker([a, b])
    assert tracker.on_barrier(a, 1, 0).is_noop
    assert tracker.on_barrier(a, 2, 1).is_noop  # a is two checkpoints ahead: nothing held
    assert tracker.admit(a, 2) is Verdict.PROCESS
    assert tracker.pending == 1
    done = tracker.on_barrier(b, 1, 3)
    assert done.completed == 1 and done.positions == {a: 0, b: 3}
    done = tracker.on_barrier(b, 2, 4)
    assert done.completed == 2 and done.positions == {a: 1, b: 4}
    assert tracker.pending is None


def test_tracker_gives_up_a_checkpoint_a_channel_skipped() -> None:
    a, b = (0, 0), (0, 1)
    tracker = BarrierTracker([a, b])
    tracker.on_barrier(a, 3, 0)
    outcome = tracker.on_barrier(b, 5, 1)  # b's upstream recovered and skipped 3 and 4
    assert outcome.aborted == 3 and outcome.completed is None
    assert tracker.on_barrier(a, 5, 2).completed == 5


# --- unaligned checkpoints -----------------------------------------------------------------------


def is_its_positions_cut(
    scenario: Scenario, state: Counter[int], outcome: BarrierOutcome, channels: set[Channel]
) -> None:
    """Per channel, exactly its records up to the snapshot's position."""
    assert not outcome.seeks and outcome.aborted is None
    held = {
        e.record
        for log in scenario.logs.values()
        for o, e in enumerate(log)
        if e.barrier is None and o <= outcome.positions[e.channel]
    }
    assert set(state) == held, f"snapshot {outcome.completed} is not its positions' cut"


def run_unaligned(scenario: Scenario, rng: random.Random, crash_rate: float) -> set[int]:
    return set(run_model(scenario, rng, crash_rate, UnalignedTracker, is_its_positions_cut))


@pytest.mark.parametrize("seed", range(300))
def test_unaligned_model_every_record_exactly_once_and_snapshots_match_positions(
    seed: int,
) -> None:
    rng = random.Random(seed)
    scenario = make_scenario(rng, partitions=rng.randint(1, 3), upstreams=rng.randint(1, 4))
    final = run_unaligned(scenario, rng, crash_rate=0.0 if seed % 3 == 0 else 0.02)
    assert final == scenario.records


def test_unaligned_snapshots_at_the_first_barrier() -> None:
    a, b = (0, 0), (0, 1)
    tracker = UnalignedTracker([a, b])
    assert tracker.admit(b, 0) is Verdict.PROCESS
    done = tracker.on_barrier(a, 1, 1)
    assert done.completed == 1 and done.positions == {a: 1, b: 0}  # b's barrier not yet read
    assert tracker.admit(b, 2) is Verdict.PROCESS  # b is never held back
    assert tracker.on_barrier(b, 1, 3).is_noop
    assert tracker.pending is None


# --- the replay after a fallback restore -------------------------------------------------------


def _processing_order(
    log: list[Entry], handler: BarrierHandler, start: int, until: int
) -> tuple[list[int | tuple[str, int]], dict[Channel, int]]:
    """One partition read from ``start`` until checkpoint ``until`` completes: the records
    processed and the checkpoints completed, in order, and the positions at ``until``."""
    order: list[int | tuple[str, int]] = []
    offset = start
    while offset < len(log):
        entry = log[offset]
        if entry.barrier is None:
            if handler.admit(entry.channel, offset) is Verdict.PROCESS:
                order.append(entry.record)
            offset += 1
            continue
        outcome = handler.on_barrier(entry.channel, entry.barrier, offset)
        offset += 1
        if outcome.completed is not None:
            order.append(("completed", outcome.completed))
            if outcome.completed == until:
                return order, dict(outcome.positions)
        offset = min([offset, *outcome.seeks.values()])
    raise AssertionError(f"checkpoint {until} never completed")


@pytest.mark.parametrize("seed", range(200))
def test_replay_from_an_older_snapshot_aligns_as_the_first_run_did(seed: int) -> None:
    """A fallback restore of snapshot m, whose committed checkpoint n is lost, replays with
    the aligner at m: the records between come in the very order, and the checkpoints
    complete at the very places, of the first run. Order-sensitive operators (a first-sight
    ``process``, a last-value ``reduce``, windows fired by watermarks) depend on it."""
    rng = random.Random(seed)
    scenario = make_scenario(rng, partitions=1, upstreams=rng.randint(2, 4))
    log = scenario.logs[0]
    channels = {e.channel for e in log}
    first, _ = _processing_order(log, BarrierAligner(channels), 0, 40)
    completed = [c for c in first if isinstance(c, tuple)]
    n = rng.choice(completed)
    m = rng.choice([c for c in completed if c < n] or [("completed", 0)])
    # The snapshot of m as the first run took it (0: the empty state before any).
    positions = _processing_order(log, BarrierAligner(channels), 0, m[1])[1] if m[1] else {}
    replayer = BarrierAligner(channels, positions, m[1])
    replayed, _ = _processing_order(log, replayer, replayer.resume_offsets()[0], n[1])
    start = first.index(m) + 1 if m[1] else 0
    assert replayed == first[start : first.index(n) + 1]
