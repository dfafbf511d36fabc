"""Task placement (sticky, balanced, deterministic) and worker liveness: pure logic, no Kafka."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import pytest

from processor.runtime.assignment import WorkerRegistry, WorkerState, assign

Assign = Callable[[Sequence[str], Sequence[str], Mapping[str, str]], dict[str, str]]


def _tasks(stage: str, n: int) -> list[str]:
    return [f"{stage}-{i}" for i in range(n)]


def _loads(result: Mapping[str, str], workers: Sequence[str]) -> dict[str, int]:
    counts = Counter(result.values())
    return {w: counts[w] for w in set(workers)}


def check(
    tasks: Sequence[str],
    workers: Sequence[str],
    current: Mapping[str, str],
    result: Mapping[str, str],
) -> None:
    """Every invariant that assign() promises, for one call."""
    live = set(workers)
    if not live:
        assert result == {}
        return
    wanted = set(tasks)
    # Every task exactly once (a dict cannot hold a task twice), each on a live worker, and
    # nothing that is not a task.
    assert set(result) == wanted
    assert set(result.values()) <= live
    # Balanced: loads (idle workers included) differ by at most one.
    loads = _loads(result, workers)
    assert max(loads.values()) - min(loads.values()) <= 1
    # Sticky: a worker keeps all its current tasks when it ends with at least as many, and
    # otherwise keeps exactly as many as it ends with (it only gives tasks away, never
    # swaps one of its own for another).
    cur = Counter(w for t, w in current.items() if t in wanted and w in live)
    for w in live:
        kept = sum(1 for t, cw in current.items() if cw == w and result.get(t) == w)
        assert kept == min(cur[w], loads[w]), (w, kept, cur[w], loads[w])
    # ... and the moves are as few as any balanced assignment could make: the workers that
    # end with one extra task are ones that already had more than the floor.
    floor, extra = divmod(len(wanted), len(live))
    best = sum(min(c, floor) for c in cur.values()) + min(
        extra, sum(1 for c in cur.values() if c > floor)
    )
    kept_total = sum(1 for t, w in current.items() if w in live and result.get(t) == w)
    assert kept_total == best


# --- examples -------------------------------------------------------------------------------


def test_no_workers_gives_empty_assignment() -> None:
    assert assign(_tasks("split", 4), [], {}) == {}
    assert assign(_tasks("split", 4), [], {"split-0": "w1"}) == {}
    assert assign([], [], {}) == {}


def test_no_tasks_gives_empty_assignment() -> None:
    assert assign([], ["w1", "w2"], {}) == {}
    assert assign([], ["w1"], {"split-0": "w1"}) == {}


def test_fresh_assignment_round_robins_in_task_order() -> None:
    tasks = _tasks("split", 3) + _tasks("count", 3)
    result = assign(tasks, ["w2", "w1"], {})
    # Ordered by (stage, index): count-0..2, split-0..2; each to the least loaded, ties by name.
    assert result == {
        "count-0": "w1",
        "count-1": "w2",
        "count-2": "w1",
        "split-0": "w2",
        "split-1": "w1",
        "split-2": "w2",
    }
    check(tasks, ["w1", "w2"], {}, result)


def test_task_order_is_numeric_not_lexicographic() -> None:
    tasks = _tasks("count", 12)
    result = assign(tasks, ["a", "b"], {})
    assert [t for t in sorted(result, key=lambda t: int(t.split("-")[1])) if result[t] == "a"] == [
        f"count-{i}" for i in range(0, 12, 2)
    ]


def test_single_worker_gets_everything() -> None:
    tasks = _tasks("split", 5)
    assert assign(tasks, ["only"], {}) == dict.fromkeys(tasks, "only")
    assert assign(tasks, ["only"], {"split-0": "dead"}) == dict.fromkeys(tasks, "only")


def test_more_workers_than_tasks() -> None:
    tasks = _tasks("split", 2)
    workers = ["w1", "w2", "w3", "w4"]
    result = assign(tasks, workers, {})
    assert len(set(result.values())) == 2
    check(tasks, workers, {}, result)


def test_duplicate_tasks_and_workers_are_collapsed() -> None:
    result = assign(["split-0", "split-0", "split-1"], ["w1", "w1", "w2"], {})
    assert result == {"split-0": "w1", "split-1": "w2"}


def test_balanced_assignment_of_live_workers_is_unchanged() -> None:
    tasks = _tasks("split", 5)
    current = {
        "split-0": "w2",
        "split-1": "w2",
        "split-2": "w1",
        "split-3": "w3",
        "split-4": "w1",
    }
    assert assign(tasks, ["w1", "w2", "w3"], current) == current


def test_sticky_within_difference_of_one() -> None:
    # 3 vs 2: not worth a restore, nothing moves even though round-robin would differ.
    tasks = _tasks("count", 5)
    current = {"count-0": "b", "count-1": "b", "count-2": "b", "count-3": "a", "count-4": "a"}
    assert assign(tasks, ["a", "b"], current) == current


def test_difference_of_two_moves_exactly_one_task() -> None:
    tasks = _tasks("count", 4)
    current = {"count-0": "b", "count-1": "b", "count-2": "b", "count-3": "a"}
    result = assign(tasks, ["a", "b"], current)
    # The busiest worker's last task (by order) moves to the idlest.
    assert result == {"count-0": "b", "count-1": "b", "count-2": "a", "count-3": "a"}
    check(tasks, ["a", "b"], current, result)


def test_dead_workers_tasks_move_to_least_loaded() -> None:
    tasks = _tasks("split", 6)
    current = {
        "split-0": "w1",
        "split-1": "w1",
        "split-2": "w2",
        "split-3": "w3",
        "split-4": "w3",
        "split-5": "w3",
    }
    # w3 dies: its three tasks go to w2 (1 task) first, then alternate by load.
    result = assign(tasks, ["w1", "w2"], current)
    for t in ["split-0", "split-1", "split-2"]:
        assert result[t] == current[t]
    assert _loads(result, ["w1", "w2"]) == {"w1": 3, "w2": 3}
    assert result == {
        "split-0": "w1",
        "split-1": "w1",
        "split-2": "w2",
        "split-3": "w2",
        "split-4": "w1",
        "split-5": "w2",
    }
    check(tasks, ["w1", "w2"], current, result)


def test_only_the_dead_workers_tasks_move() -> None:
    tasks = _tasks("split", 4) + _tasks("count", 8)
    workers = ["w1", "w2", "w3", "w4"]
    current = assign(tasks, workers, {})
    survivors = ["w1", "w2", "w4"]
    result = assign(tasks, survivors, current)
    for t, w in current.items():
        if w != "w3":
            assert result[t] == w
    assert _loads(result, survivors) == {"w1": 4, "w2": 4, "w4": 4}
    check(tasks, survivors, current, result)


def test_joining_worker_takes_tasks_until_balanced() -> None:
    tasks = _tasks("count", 9)
    current = assign(tasks, ["w1", "w2"], {})
    result = assign(tasks, ["w1", "w2", "w3"], current)
    assert _loads(result, ["w1", "w2", "w3"]) == {"w1": 3, "w2": 3, "w3": 3}
    # Only tasks that moved to the newcomer changed.
    moved = {t for t in tasks if result[t] != current[t]}
    assert {result[t] for t in moved} == {"w3"}
    assert len(moved) == 3
    check(tasks, ["w1", "w2", "w3"], current, result)


def test_joining_worker_with_uneven_total() -> None:
    tasks = _tasks("count", 7)
    current = dict.fromkeys(tasks, "w1")
    result = assign(tasks, ["w1", "w2", "w3"], current)
    loads = _loads(result, ["w1", "w2", "w3"])
    assert sorted(loads.values()) == [2, 2, 3]
    assert loads["w1"] == 3  # the worker that had them all keeps the extra one
    check(tasks, ["w1", "w2", "w3"], current, result)


def test_rejoining_worker_is_treated_like_a_new_one() -> None:
    tasks = _tasks("split", 4)
    before = {"split-0": "a", "split-1": "a", "split-2": "b", "split-3": "b"}
    without_b = assign(tasks, ["a"], before)
    assert set(without_b.values()) == {"a"}
    back = assign(tasks, ["a", "b"], without_b)
    assert _loads(back, ["a", "b"]) == {"a": 2, "b": 2}
    check(tasks, ["a", "b"], without_b, back)


def test_tasks_not_in_the_task_list_are_dropped() -> None:
    tasks = _tasks("split", 2)
    current = {"split-0": "w1", "split-1": "w2", "split-9": "w1", "gone-0": "w2"}
    result = assign(tasks, ["w1", "w2"], current)
    assert result == {"split-0": "w1", "split-1": "w2"}


def test_dropped_tasks_do_not_count_as_load() -> None:
    # Regression: stale tasks of "a" used to count as load while the new tasks were placed,
    # so both new tasks did not go to "a" and afterwards one of b's own tasks had to move.
    tasks = ["t-0", "t-1", "t-5", "t-6"]
    current = {"old-1": "a", "old-2": "a", "old-3": "a", "t-5": "b", "t-6": "b"}
    result = assign(tasks, ["a", "b"], current)
    assert result == {"t-0": "a", "t-1": "a", "t-5": "b", "t-6": "b"}
    check(tasks, ["a", "b"], current, result)


def test_shrinking_task_list_rebalances() -> None:
    # The job lost tasks: what is left is rebalanced, and only as much as needed.
    current = {f"count-{i}": ("a" if i < 4 else "b") for i in range(8)}
    tasks = [f"count-{i}" for i in range(4)] + ["count-4"]
    result = assign(tasks, ["a", "b"], current)
    assert _loads(result, ["a", "b"]) == {"a": 3, "b": 2}
    assert result["count-4"] == "b"
    check(tasks, ["a", "b"], current, result)


def test_current_pointing_at_unknown_workers_is_ignored() -> None:
    tasks = _tasks("split", 3)
    current = {"split-0": "ghost", "split-1": "ghost", "split-2": "w1"}
    result = assign(tasks, ["w1", "w2"], current)
    assert result["split-2"] == "w1"
    check(tasks, ["w1", "w2"], current, result)


def test_inputs_are_not_mutated() -> None:
    tasks = _tasks("split", 3)
    workers = ["w2", "w1"]
    current = {"split-0": "w2", "old-0": "w1"}
    assign(tasks, workers, current)
    assert tasks == ["split-0", "split-1", "split-2"]
    assert workers == ["w2", "w1"]
    assert current == {"split-0": "w2", "old-0": "w1"}


def test_accepts_any_iterables() -> None:
    result = assign(iter(_tasks("split", 3)), (w for w in ["w1", "w2"]), {})
    assert result == assign(_tasks("split", 3), ["w1", "w2"], {})


@pytest.mark.parametrize(
    "names",
    [
        ["x", "x-0"],  # a plain name and an index that sort the same
        ["x-1", "x-01"],  # two spellings of the same index
        ["s-3", "s-\u0663"],  # ARABIC-INDIC DIGIT THREE: int() reads it as 3
        ["s-\u00b2", "s-2"],  # SUPERSCRIPT TWO: isdigit() but not int()
        ["a-b-1", "a-b-0", "a-", "-1", "-", ""],
    ],
)
def test_odd_task_names_are_placed_deterministically(names: list[str]) -> None:
    workers = ["w1", "w2", "w3"]
    expected = assign(names, workers, {})
    check(names, workers, {}, expected)
    rng = random.Random(7)
    for _ in range(20):
        shuffled = names[:]
        rng.shuffle(shuffled)
        assert assign(shuffled, workers[::-1], {}) == expected


def test_deterministic_for_equal_inputs() -> None:
    tasks = _tasks("split", 7) + _tasks("count", 11)
    current = {"split-0": "w3", "count-5": "w3", "count-6": "w1", "gone-1": "w2"}
    first = assign(tasks, ["w1", "w2", "w3", "w4"], current)
    for _ in range(5):
        assert assign(tasks, ["w1", "w2", "w3", "w4"], current) == first


# --- property-style -------------------------------------------------------------------------


def _random_case(rng: random.Random) -> tuple[list[str], list[str], dict[str, str]]:
    stages = ["split", "count", "my-stage"]
    pool = [f"{s}-{i}" for s in stages for i in range(rng.randint(0, 12))]
    tasks = rng.sample(pool, rng.randint(0, len(pool)))
    all_workers = [f"w{i}" for i in range(rng.randint(1, 8))]
    workers = rng.sample(all_workers, rng.randint(0, len(all_workers)))
    current: dict[str, str] = {}
    # Part of the tasks (and some that no longer exist) already placed, on live or dead workers.
    for t in pool + [f"stale-{i}" for i in range(rng.randint(0, 5))]:
        if rng.random() < 0.6:
            current[t] = rng.choice([*all_workers, "gone"])
    return tasks, workers, current


def _shuffled_dict(rng: random.Random, d: Mapping[str, str]) -> dict[str, str]:
    items = list(d.items())
    rng.shuffle(items)
    return dict(items)


@pytest.mark.parametrize("seed", range(20))
def test_random_cases_hold_every_invariant(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        tasks, workers, current = _random_case(rng)
        result = assign(tasks, workers, current)
        check(tasks, workers, current, result)
        # Deterministic: the order of the inputs does not matter.
        t2, w2 = tasks[:], workers[:]
        rng.shuffle(t2)
        rng.shuffle(w2)
        assert assign(t2, w2, _shuffled_dict(rng, current)) == result
        # Stable: a balanced assignment of live workers is a fixed point.
        assert assign(tasks, workers, result) == result


@pytest.mark.parametrize("seed", range(5))
def test_random_membership_histories_stay_sticky(seed: int) -> None:
    """Workers come and go one step at a time; every step is checked against the last one."""
    rng = random.Random(1000 + seed)
    tasks = _tasks("split", rng.randint(1, 8)) + _tasks("count", rng.randint(1, 16))
    universe = [f"w{i}" for i in range(6)]
    live = set(rng.sample(universe, 2))
    placement: dict[str, str] = {}
    for _ in range(60):
        if rng.random() < 0.5 and len(live) < len(universe):
            live.add(rng.choice(sorted(set(universe) - live)))
        elif live:
            live.discard(rng.choice(sorted(live)))
        new = assign(tasks, sorted(live), placement)
        check(tasks, sorted(live), placement, new)
        placement = new


# --- worker registry ------------------------------------------------------------------------


def test_heartbeat_of_new_worker_is_a_membership_change() -> None:
    reg = WorkerRegistry(timeout_s=3.0)
    assert reg.heartbeat("w1", "inc-a", now=0.0) is True
    assert reg.alive == ["w1"]
    assert reg.workers["w1"] == WorkerState("inc-a", 0.0)


def test_repeated_heartbeat_is_not_a_change_but_refreshes() -> None:
    reg = WorkerRegistry(timeout_s=3.0)
    reg.heartbeat("w1", "inc-a", now=0.0)
    assert reg.heartbeat("w1", "inc-a", now=2.5) is False
    assert reg.workers["w1"].last_seen == 2.5
    # Refreshed: 4.0 is only 1.5 s after the last heartbeat.
    assert reg.expire(now=4.0) == []
    assert reg.alive == ["w1"]


def test_new_incarnation_is_a_change_at_once() -> None:
    reg = WorkerRegistry(timeout_s=3.0)
    reg.heartbeat("w1", "inc-a", now=0.0)
    assert reg.heartbeat("w1", "inc-b", now=0.1) is True
    assert reg.workers["w1"] == WorkerState("inc-b", 0.1)
    assert reg.heartbeat("w1", "inc-b", now=0.2) is False
    # Back to an old incarnation is also a change (a different process).
    assert reg.heartbeat("w1", "inc-a", now=0.3) is True
    assert reg.alive == ["w1"]


def test_expire_after_timeout_only() -> None:
    reg = WorkerRegistry(timeout_s=3.0)
    reg.heartbeat("w1", "a", now=0.0)
    reg.heartbeat("w2", "b", now=1.0)
    assert reg.expire(now=3.0) == []  # exactly the timeout: still alive
    assert reg.expire(now=3.5) == ["w1"]
    assert reg.alive == ["w2"]
    assert "w1" not in reg.workers
    assert reg.expire(now=3.5) == []  # already gone
    assert reg.expire(now=100.0) == ["w2"]
    assert reg.alive == []


def test_expired_worker_coming_back_is_new() -> None:
    reg = WorkerRegistry(timeout_s=1.0)
    reg.heartbeat("w1", "a", now=0.0)
    assert reg.expire(now=5.0) == ["w1"]
    assert reg.heartbeat("w1", "a", now=5.0) is True
    assert reg.alive == ["w1"]


def test_alive_is_sorted() -> None:
    reg = WorkerRegistry(timeout_s=1.0)
    for i, w in enumerate(["w3", "w1", "w2"]):
        reg.heartbeat(w, "x", now=float(i))
    assert reg.alive == ["w1", "w2", "w3"]
    # w3 was seen at 0.0, w1 at 1.0, w2 at 2.0.
    assert sorted(reg.expire(now=2.5)) == ["w1", "w3"]
    assert reg.alive == ["w2"]


def test_registry_drives_assignment() -> None:
    reg = WorkerRegistry(timeout_s=1.0)
    tasks = _tasks("count", 6)
    reg.heartbeat("w1", "a", now=0.0)
    reg.heartbeat("w2", "a", now=0.0)
    placement = assign(tasks, reg.alive, {})
    reg.heartbeat("w2", "a", now=1.5)
    assert reg.expire(now=1.5) == ["w1"]
    after = assign(tasks, reg.alive, placement)
    assert set(after.values()) == {"w2"}
    check(tasks, reg.alive, placement, after)


def test_check_detects_a_needless_move() -> None:
    """The sticky invariant is strict enough to reject the pre-fix behaviour."""
    current = {"old-1": "a", "old-2": "a", "old-3": "a", "t-5": "b", "t-6": "b"}
    bad = {"t-5": "b", "t-6": "a", "t-0": "b", "t-1": "a"}
    with pytest.raises(AssertionError):
        check(["t-0", "t-1", "t-5", "t-6"], ["a", "b"], current, bad)
