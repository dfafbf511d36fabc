"""What the coordinator knows of each task: what its worker last said of it in a heartbeat.

Pure: the coordinator feeds it heartbeats and asks which tasks can acknowledge a pending
checkpoint and which have given up.

A worker that restarts under its id faster than its heartbeat timeout (a supervisor's
restart: docker's ``restart: always``, a pod's) is never missed: its new process's first
heartbeat replaces the old one in the registry at once. Its tasks start again from their
last committed checkpoint, and a task restored at checkpoint n never acknowledges n (it
acts only on newer triggers and barriers). So when the old process died between its commit
of n and its acknowledgement, checkpoint n waits for an acknowledgement that cannot come:
every later checkpoint waited behind it until its timeout (a minute by default). What the
old process said of its tasks is void: forgotten, they count as not running until the new
process reports them, and the pending checkpoint fails at once. The new process's first
heartbeat precedes anything its tasks send (it is sent before it runs any, on the same
control partition), so nothing the new process did is lost with it.

>>> from processor.models.control import TaskStatus
>>> reports = TaskReports()
>>> reports.heard("w0", restarted=False, tasks={"count-0": TaskStatus("running", 7)})
>>> reports.not_running(["count-0"], {"count-0": "w0"}, alive=["w0"])
set()
>>> reports.heard("w0", restarted=True, tasks={})  # w0's new process: no task yet
>>> reports.not_running(["count-0"], {"count-0": "w0"}, alive=["w0"])
{'count-0'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processor.models.control import TaskStatus


@dataclass(frozen=True)
class TaskReport:
    worker: str  # the worker whose heartbeat said it
    state: str  # starting | running | failed | stopped
    checkpoint: int  # the task's last committed checkpoint
    reason: str  # why it failed for good or stopped


class TaskReports:
    """Each task's last report; see the module's docstring."""

    def __init__(self) -> None:
        self.reports: dict[str, TaskReport] = {}

    def heard(self, worker: str, restarted: bool, tasks: Mapping[str, TaskStatus]) -> None:
        """A heartbeat of ``worker`` with its ``tasks``; ``restarted``: the first from a new
        process under a known worker id (what the old one said is void)."""
        if restarted:
            self.reports = {t: r for t, r in self.reports.items() if r.worker != worker}
        for task, status in tasks.items():
            self.reports[task] = TaskReport(worker, status.state, status.checkpoint, status.reason)

    def not_running(
        self, tasks: Iterable[str], placement: Mapping[str, str], alive: Iterable[str]
    ) -> set[str]:
        """Tasks that cannot acknowledge a pending checkpoint: placed on no live worker, not
        reported (since its last start) by the worker they are placed on, or reported as
        anything but running."""
        live = set(alive)
        return {task for task in tasks if not self._runs_on_live(task, placement.get(task), live)}

    def _runs_on_live(self, task: str, worker: str | None, live: set[str]) -> bool:
        report = self.reports.get(task)
        return (
            worker in live
            and report is not None
            and report.worker == worker
            and report.state == "running"
        )

    def given_up(self) -> tuple[str, str] | None:
        """A task its worker reports failed for good or stopped, and why."""
        for task, report in sorted(self.reports.items()):
            if report.state in ("failed", "stopped") and report.reason:
                failed = "failed for good" if report.state == "failed" else "stopped"
                return task, f"{failed}: {report.reason}"
        return None
