"""A zombie caught with a commit in flight: a worker frozen (SIGSTOP) at the step before its
task's commit, its tasks taken over while it is away, then continued.

A random fault rarely finds a commit in flight, so this test stops the worker at the very step
(`processor.faults`, ``<point>@<task>:stop``):

- ``offsets_sent``: the epoch's output and input positions are in the open transaction, only
  ``commit_transaction`` is left (a keyed task and a source task);
- ``snapshot_durable``: the keyed task's snapshot of the epoch is in checkpoint storage, the
  transaction not yet committed.

The new owner of the task starts it with the same transactional id, which fences the frozen
one: the broker aborts its open transaction. Once continued, the frozen one either tries its
commit, which fails, or first reads the assignment that moved its task and stops it, aborting
(which fails too): which comes first is a race between its two threads. Its output must never
become visible, and what it does to checkpoint storage after (it reaches it all
along) must not harm the new owner: at the end every worker is killed and every task restores
from that storage. The output is then verified record by record.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.integration.harness import JobRun, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

IN_FLIGHT = [
    ("offsets_sent", "count-0"),
    ("offsets_sent", "split-0"),
    ("snapshot_durable", "count-0"),
]


# How the zombie's task ends (processor.worker.service): its commit fenced, or stopped first.
_ENDS = ("failed", "stopped")

# The longest the zombie may take to end its task: its commit's own bound (60 s, plus the 5 s
# grace of `processor.kafka.serial`), then closing the task's clients; usually 1 s.
ZOMBIE_END_S = 120


def _state(pid: int) -> str:
    """The one-letter state of process ``pid`` (T: stopped)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


@pytest.mark.parametrize(("point", "task"), IN_FLIGHT)
def test_a_zombie_frozen_before_its_commit_is_fenced(
    point: str, task: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        run.start_coordinator()
        # Alone at first, so that it runs every task; frozen at its third commit of the task.
        run.start_worker(0, fault=f"{point}@{task}#3:stop")
        run.feed(400_000, seconds=30)
        zombie = run.workers[0]
        wait_until(lambda: _state(zombie.pid) == "T", 120, f"worker-0 to stop at {point}")
        assert f"fault point {point} reached by {task}: SIGSTOP" in run.log("worker-0")
        assert run.feeding, "the input ended before the freeze: lengthen the feed"

        # Its tasks move to a new worker, whose transactions fence the frozen ones.
        run.start_worker(1)
        run.wait_for_checkpoints(2, timeout=180)
        zombie.send_signal(signal.SIGCONT)
        try:
            wait_until(
                lambda: any(f"task {task} {end}" in run.log("worker-0") for end in _ENDS),
                ZOMBIE_END_S,
                f"the zombie's {task} to fail at its commit or stop",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{run.stacks('worker-0', zombie)}") from None
        run.wait_for_checkpoints(2, timeout=180)

        # Whatever the zombie did to checkpoint storage: every task restores from it.
        for i in range(2):
            run.kill_worker(i)
        for i in range(2):
            run.start_worker(i)
        run.finish()
    finally:
        run.stop()
