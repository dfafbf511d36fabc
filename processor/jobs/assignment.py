"""Which worker runs which task, and which workers are alive. No I/O.

Task ids are ``<stage>-<index>`` and the stages differ in cost (``split`` tasks parse and
tokenize, ``count`` tasks only update state), so a worker must get a fair share of *each*
stage, not just of the task count: balancing totals alone can leave all of the expensive
tasks on one worker while another core idles. ``assign`` therefore guarantees, for the live
workers:

- per stage, the numbers of that stage's tasks on any two workers differ by at most one;
- and the total loads differ by at most one as well (always possible: each stage's ``n mod
  W`` "extra" tasks go to distinct workers, and which workers get them is free to choose).

Assignment is sticky, because moving a task costs a restore: among all placements with
both properties it picks one that moves the fewest tasks of live workers. Tasks of dead or
unknown workers, and new tasks, are placed but do not count as moves. A worker keeps the
first tasks of a stage (in task order) and gives away the last ones, and it never swaps a
task of a stage for another one of the same stage.

The only real choice is which workers hold each stage's extra task: each extra given to a
worker that holds more than the even share of that stage now saves one move. Those choices
interact through the total balance (a worker can hold only so many extras in all), so they
are made stage by stage, each on the preferred worker (one that saves a move, then the
fewest extras so far, then the name) for which a min-cost flow still reaches the fewest
moves overall. For a fresh start this is plain round-robin in task order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from processor.models.control import Assignment


def assign(
    tasks: Iterable[str], workers: Iterable[str], current: Mapping[str, str]
) -> dict[str, str]:
    live = sorted(set(workers))
    if not live:
        return {}
    n_workers = len(live)
    index = {w: i for i, w in enumerate(live)}
    # Tasks grouped by stage, stages and tasks in task order.
    stages: dict[str, list[str]] = {}
    for task in sorted(set(tasks), key=_task_order):
        stages.setdefault(_stage(task), []).append(task)
    # The stage's tasks that each live worker runs now. Tasks that no longer exist are not
    # in here at all: counted as load, they would force needless moves.
    held: dict[str, list[list[str]]] = {s: [[] for _ in live] for s in stages}
    for stage, stage_tasks in stages.items():
        for task in stage_tasks:
            worker = current.get(task)
            if worker is not None and worker in index:
                held[stage][index[worker]].append(task)
    shares = [divmod(len(stage_tasks), n_workers) for stage_tasks in stages.values()]
    saves = [
        [len(on_worker) > floor for on_worker in held[stage]]
        for stage, (floor, _) in zip(stages, shares, strict=True)
    ]
    extra = _choose_extras([e for _, e in shares], saves, n_workers)

    result: dict[str, str] = {}
    load = [0] * n_workers
    targets: dict[str, list[int]] = {}
    for i, stage in enumerate(stages):
        floor = shares[i][0]
        targets[stage] = [floor + extra[i][w] for w in range(n_workers)]
        for w, on_worker in enumerate(held[stage]):
            for task in on_worker[: targets[stage][w]]:  # keep the first ones
                result[task] = live[w]
                load[w] += 1
    count = {s: [min(len(h), t) for h, t in zip(held[s], targets[s], strict=True)] for s in stages}
    # Everything else (new tasks, tasks of dead workers, the surplus given away), in task
    # order, to a worker still below its target for the stage: the fewest of the stage,
    # then the lowest load, then the name.
    for stage, stage_tasks in stages.items():
        for task in stage_tasks:
            if task in result:
                continue
            have, want = count[stage], targets[stage]
            w = min(
                (w for w in range(n_workers) if have[w] < want[w]),
                key=lambda w: (have[w], load[w], w),
            )
            result[task] = live[w]
            have[w] += 1
            load[w] += 1
    return result


def _choose_extras(
    extras: Sequence[int], saves: Sequence[Sequence[bool]], n_workers: int
) -> list[list[int]]:
    """Which workers get the one task above the even share of each stage (1) or not (0).

    Stage ``i`` needs ``extras[i]`` distinct workers, and every worker ends with ``k`` or
    ``k + 1`` extras in all (``k = sum(extras) // n_workers``), which keeps total loads
    within one. ``saves[i][w]``: the worker holds more than the even share of stage ``i``,
    so the extra there saves a move. Most saved moves first; among those, stage by stage,
    the workers that save a move, then the fewest extras so far, then by name.
    """
    n_stages = len(extras)
    if sum(extras) == 0:
        return [[0] * n_workers for _ in range(n_stages)]
    fixed: list[list[bool | None]] = [[None] * n_workers for _ in range(n_stages)]
    found = _best_completion(extras, saves, fixed, n_workers)
    if found is None:  # pragma: no cover - a cyclic layout always exists
        raise AssertionError("no balanced placement of the extra tasks")
    best, witness = found
    k, r = divmod(sum(extras), n_workers)
    held = [0] * n_workers
    for i in range(n_stages):
        order = sorted(range(n_workers), key=lambda w: (not saves[i][w], held[w], w))
        taken = 0
        for w in order:
            full = held[w] > k or (held[w] == k and held.count(k + 1) == r)
            if taken == extras[i] or full:
                fixed[i][w] = False
                continue
            fixed[i][w] = True
            if not witness[i][w]:
                # The witness (an optimal completion of every choice so far) disagrees: is
                # there another optimal one that agrees?
                found = _best_completion(extras, saves, fixed, n_workers)
                if found is None or found[0] < best:
                    fixed[i][w] = False
                    continue
                witness = found[1]
            taken += 1
            held[w] += 1
    return [[1 if f else 0 for f in row] for row in fixed]


def _best_completion(
    extras: Sequence[int],
    saves: Sequence[Sequence[bool]],
    fixed: Sequence[Sequence[bool | None]],
    n_workers: int,
) -> tuple[int, list[list[bool]]] | None:
    """The most saved moves of a valid choice of extras that agrees with ``fixed`` (True:
    chosen, False: not chosen, None: open), and one such choice; None if there is none.

    A min-cost flow: source -> stage (its open extras) -> worker (1 for each open cell;
    cost -BIG if it saves a move, plus a small cyclic preference so that a fresh start
    comes out as round-robin) -> sink (up to k in all) or -> "plus" -> sink (one more, for
    r = total mod workers of them). The flow must use all of the sink's capacity, so every
    worker ends with exactly k or k + 1 extras.
    """
    n_stages = len(extras)
    total = sum(extras)
    k, r = divmod(total, n_workers)
    big = total * n_workers + 1  # more than any sum of preferences
    degree = [0] * n_workers
    saved = 0
    source, plus, sink = 0, 1 + n_stages + n_workers, 2 + n_stages + n_workers
    edges: list[tuple[int, int, int, int]] = []
    cells: dict[int, tuple[int, int]] = {}  # edge index -> (stage, worker)
    offset = 0
    amount = 0
    for i in range(n_stages):
        chosen = [w for w in range(n_workers) if fixed[i][w] is True]
        supply = extras[i] - len(chosen)
        if supply < 0:
            return None
        for w in chosen:
            degree[w] += 1
            saved += saves[i][w]
        edges.append((source, 1 + i, supply, 0))
        amount += supply
        for w in range(n_workers):
            if fixed[i][w] is None:
                cost = (w - offset) % n_workers - (big if saves[i][w] else 0)
                cells[len(edges)] = (i, w)
                edges.append((1 + i, 1 + n_stages + w, 1, cost))
        offset += extras[i]
    plus_capacity = r
    for w in range(n_workers):
        if degree[w] > k + 1:
            return None
        if degree[w] == k + 1:
            plus_capacity -= 1
        else:
            edges.append((1 + n_stages + w, sink, k - degree[w], 0))
            edges.append((1 + n_stages + w, plus, 1, 0))
    if plus_capacity < 0:
        return None
    edges.append((plus, sink, plus_capacity, 0))
    flow = _min_cost_flow(sink + 1, edges, source, sink, amount)
    if flow is None:
        return None
    choice = [[f is True for f in row] for row in fixed]
    for edge, (i, w) in cells.items():
        if flow[edge]:
            choice[i][w] = True
            saved += saves[i][w]
    return saved, choice


def _min_cost_flow(
    n_nodes: int,
    edges: Sequence[tuple[int, int, int, int]],
    source: int,
    sink: int,
    amount: int,
) -> list[int] | None:
    """Flow on each (tail, head, capacity, cost) edge of a cheapest flow of ``amount``
    units, or None when that much cannot flow. Successive shortest paths (Bellman-Ford
    with a queue, as costs are negative); the graphs here are a few dozen nodes."""
    adjacent: list[list[int]] = [[] for _ in range(n_nodes)]
    head: list[int] = []
    capacity: list[int] = []
    cost: list[int] = []
    for tail, to, cap, c in edges:
        adjacent[tail].append(len(head))  # edge 2j; its residual twin is 2j + 1 (e ^ 1)
        head.append(to)
        capacity.append(cap)
        cost.append(c)
        adjacent[to].append(len(head))
        head.append(tail)
        capacity.append(0)
        cost.append(-c)
    unreached = 1 << 62
    for _ in range(amount):
        dist = [unreached] * n_nodes
        via = [-1] * n_nodes
        queued = [False] * n_nodes
        dist[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            queued[u] = False
            for e in adjacent[u]:
                v = head[e]
                if capacity[e] > 0 and dist[u] + cost[e] < dist[v]:
                    dist[v] = dist[u] + cost[e]
                    via[v] = e
                    if not queued[v]:
                        queued[v] = True
                        queue.append(v)
        if dist[sink] == unreached:
            return None
        v = sink
        while v != source:
            e = via[v]
            capacity[e] -= 1
            capacity[e ^ 1] += 1
            v = head[e ^ 1]
    return [capacity[2 * j + 1] for j in range(len(edges))]


def _stage(task: str) -> str:
    return _task_order(task)[0]


def _task_order(task: str) -> tuple[str, int, str]:
    # The task itself breaks ties ("x" vs "x-0", "x-1" vs "x-01"), so that the result does
    # not depend on the order of the inputs. isdecimal, not isdigit: int("²") fails.
    stage, _, index = task.rpartition("-")
    return (stage, int(index), task) if index.isdecimal() else (task, 0, task)


@dataclass
class WorkerState:
    incarnation: str
    last_seen: float


class WorkerRegistry:
    """Liveness from heartbeats; a new incarnation of a worker id replaces the old one at once."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.workers: dict[str, WorkerState] = {}

    def is_restart(self, worker: str, incarnation: str) -> bool:
        """A heartbeat from a new process under a worker id still alive here."""
        known = self.workers.get(worker)
        return known is not None and known.incarnation != incarnation

    def heartbeat(self, worker: str, incarnation: str, now: float) -> bool:
        """Record a heartbeat; True when the worker is new or restarted (a membership change)."""
        known = self.workers.get(worker)
        self.workers[worker] = WorkerState(incarnation, now)
        return known is None or known.incarnation != incarnation

    def expire(self, now: float) -> list[str]:
        dead = [w for w, s in self.workers.items() if now - s.last_seen > self.timeout_s]
        for w in dead:
            del self.workers[w]
        return dead

    def is_alive(self, worker: str) -> bool:
        return worker in self.workers

    @property
    def alive(self) -> list[str]:
        return sorted(self.workers)


class FollowedAssignment:
    """The assignment a worker follows: the newest generation, as long as its coordinator
    keeps sending it (every heartbeat interval). One not heard again for ``timeout_s`` (its
    coordinator died, or it was a forged record with a generation no coordinator has) gives
    way to the next assignment of any generation, so a forged one cannot hold the workers
    for longer than that (issue 41).

    Example::

        followed = FollowedAssignment(timeout_s=3.0)
        followed.offer(Assignment(10, 4, {}), now=0.0)  # True: taken
        followed.offer(Assignment(9, 4, {}), now=1.0)   # False: older, and 10 is recent
        followed.offer(Assignment(9, 4, {}), now=4.0)   # True: 10 was not heard again
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.current: Assignment | None = None
        self._heard = float("-inf")

    def offer(self, assignment: Assignment, now: float) -> bool:
        """Whether ``assignment`` (received at ``now``, monotonic seconds) is followed now."""
        generation = self.current.generation if self.current is not None else -1
        if assignment.generation < generation and now - self._heard <= self.timeout_s:
            return False
        self.current = assignment
        self._heard = now
        return True
