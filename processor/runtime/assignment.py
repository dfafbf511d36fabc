"""Which worker runs which task, and which workers are alive. No I/O.

Assignment is sticky: a task stays where it runs while its worker lives, because moving a
task costs a restore. Tasks of a dead worker go to the least loaded live workers, and a
worker that joins (or comes back) takes tasks from the most loaded ones until loads differ
by at most one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def assign(
    tasks: Iterable[str], workers: Iterable[str], current: Mapping[str, str]
) -> dict[str, str]:
    live = sorted(set(workers))
    if not live:
        return {}
    ordered = sorted(set(tasks), key=_task_order)
    wanted = set(ordered)
    # Drop tasks that no longer exist *before* placing the others: counted as load, they
    # would steer new tasks away from their worker and force needless moves afterwards.
    result = {t: w for t, w in current.items() if w in live and t in wanted}
    load = {w: 0 for w in live}
    for w in result.values():
        load[w] += 1
    for task in ordered:
        if task in result:
            continue
        target = min(live, key=lambda w: (load[w], w))
        result[task] = target
        load[target] += 1
    while True:
        busiest = max(live, key=lambda w: (load[w], w))
        idlest = min(live, key=lambda w: (load[w], w))
        if load[busiest] - load[idlest] <= 1:
            return result
        # Move the busiest worker's last task (by order) to the idlest.
        task = max((t for t, w in result.items() if w == busiest), key=_task_order)
        result[task] = idlest
        load[busiest] -= 1
        load[idlest] += 1


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

    @property
    def alive(self) -> list[str]:
        return sorted(self.workers)
