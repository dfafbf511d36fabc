"""The coordinator's status document (the status page and ``/api/status``): checkpoints,
tasks, workers, stages and lag, from what the coordinator knows. Pure: no I/O."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

from processor.coordinator.journal import CheckpointJournal
from processor.coordinator.machine import CoordinatorMachine
from processor.jobs.graph import JobGraph
from processor.plan.stages import Stage

HISTORY_SHOWN = 50  # checkpoints in the document's history


@dataclass(frozen=True)
class JobInfo:
    """What the document says of the job itself."""

    name: str
    incarnation: str  # the coordinator's
    graph: JobGraph
    grafana_url: str | None = None


def job_status(
    job: JobInfo, journal: CheckpointJournal, machine: CoordinatorMachine, now: float
) -> dict[str, Any]:
    """The document `StatusBoard.publish` takes, at ``now`` (monotonic seconds)."""
    wall = time.time()
    return {
        "job": job.name,
        "coordinator": job.incarnation,
        "updated_at": wall,
        "grafana_url": job.grafana_url,
        "input_topic": ", ".join(job.graph.plan.source_topics),
        "output_topic": ", ".join(job.graph.plan.sink_topics),
        "stages": _stages(job.graph, journal, machine),
        "checkpoints": _checkpoints(journal, machine, wall),
        "tasks": _tasks(journal, machine, wall),
        "workers": _workers(machine, now),
        "lag": sum(v for v in machine.lag.values() if v),
    }


def _checkpoints(
    journal: CheckpointJournal, machine: CoordinatorMachine, wall: float
) -> dict[str, Any]:
    """The last completed checkpoint, those in progress, the counts and the history."""
    completed = [
        {
            "id": r["id"],
            "status": "completed",
            "at": r.get("completed_at"),
            "duration_s": r.get("duration_s"),
            "size_bytes": r.get("uploaded_bytes"),
            "full_size_bytes": r.get("state_bytes"),
            "slowest_task": _slowest(r),
            "records_in": r.get("records_in"),
        }
        for r in journal.history[-HISTORY_SHOWN:]
    ]
    history = sorted([*completed, *journal.failures], key=lambda c: -int(c["id"]))
    last = machine.checkpoints.last_completed
    return {
        "last_completed": last.checkpoint_id
        if last
        else (journal.last["id"] if journal.last else None),
        "in_progress": sorted(machine.checkpoints.pending),
        "completed": journal.counts["completed"],
        "failed": journal.counts["failed"],
        "history": history[:HISTORY_SHOWN],
        "hour": journal.hour.checkpoints(wall),
    }


def _tasks(
    journal: CheckpointJournal, machine: CoordinatorMachine, wall: float
) -> list[dict[str, Any]]:
    """Every placed or reported task: where it runs, its state, checkpoint, lag and time."""
    lines = journal.hour.sparklines(wall)
    reports = machine.reports.reports
    placement = machine.placement
    tasks = []
    for task in sorted(set(placement) | set(reports), key=_task_key):
        report = reports.get(task)
        worker, state, checkpoint, reason = (
            (report.worker, report.state, report.checkpoint, report.reason)
            if report
            else ("", "assigned", 0, "")
        )
        watermark = machine.watermarks.get(task)
        tasks.append(
            {
                "task": task,
                "worker": placement.get(task, worker),
                "state": state,
                "checkpoint": checkpoint,
                "lag": machine.lag.get(task),
                "watermark_ms": watermark,
                "event_time_lag_s": _event_time_lag(watermark),
                "reason": reason or None,
                "hour": lines.get(task, {"records_per_s": [], "lag": []}),
            }
        )
    return tasks


def _workers(machine: CoordinatorMachine, now: float) -> list[dict[str, Any]]:
    load = collections.Counter(machine.placement.values())
    return [
        {
            "worker": w,
            "alive": True,
            "last_seen_s": round(now - st.last_seen, 2),
            "incarnation": st.incarnation,
            "tasks": load.get(w, 0),
        }
        for w, st in sorted(machine.registry.workers.items())
    ]


def _stages(
    graph: JobGraph, journal: CheckpointJournal, machine: CoordinatorMachine
) -> list[dict[str, Any]]:
    """Per stage: its kind, input, tasks and operators, rate, busyness and lag."""
    rates, busy = _stage_rates(graph, journal.history[-2:])
    parallelism = machine.job.parallelism
    return [
        {
            "stage": stage.name,
            "kind": _kind(stage),
            "input": _input(graph, stage),
            "tasks": parallelism.get(stage.name, 0),
            "operators": [n.name for n in stage.nodes],
            "upstreams": [u.name for u in stage.upstreams],
            "records_per_s": rates.get(stage.name),
            "busy": busy.get(stage.name),
            "lag": sum(
                machine.lag.get(t) or 0
                for t in machine.reports.reports
                if t.rpartition("-")[0] == stage.name
            ),
        }
        for stage in graph.stages
    ]


def _event_time_lag(watermark_ms: int | None) -> float | None:
    """Wall time less a watermark, in seconds: how far behind event time a task is."""
    if watermark_ms is None:
        return None
    return round(max(0.0, time.time() - watermark_ms / 1000), 3)


def _slowest(record: dict[str, Any]) -> str | None:
    tasks = record.get("tasks") or {}
    if not tasks:
        return None
    return str(
        max(
            tasks,
            key=lambda t: sum(
                float(tasks[t].get(k, 0)) for k in ("alignment_s", "sync_s", "upload_s")
            ),
        )
    )


def _task_key(task: str) -> tuple[str, int]:
    stage, _, index = task.rpartition("-")
    return (stage, int(index)) if index.isdecimal() else (task, 0)


def _kind(stage: Stage) -> str:
    if stage.is_source:
        return "source"
    return "join" if stage.is_join else "loop" if stage.loop is not None else "keyed"


def _input(graph: JobGraph, stage: Stage) -> str:
    """What the stage reads: its source topic, its shuffle, and a loop's feedback topic."""
    if stage.source is not None:
        return stage.source.topic
    if stage.loop is not None:
        return f"{graph.shuffle_topic(stage)} + {graph.feedback_topic(stage)} (fed back)"
    return graph.shuffle_topic(stage)


def _stage_rates(
    graph: JobGraph, last_two: list[dict[str, Any]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Over the last completed checkpoint, per stage: the records its tasks read per second,
    and how busy they were (their threads' CPU time over the time, averaged over its tasks
    that reported it; 1.0 is a task thread on a core the whole time)."""
    if len(last_two) < 2:
        return {}, {}
    before, last = last_two
    span = float(last.get("completed_at") or 0) - float(before.get("completed_at") or 0)
    if span <= 0:
        return {}, {}
    per_stage: collections.Counter[str] = collections.Counter()
    cpu: dict[str, list[float]] = {}
    for task, ack in last.get("tasks", {}).items():
        stage = task.rpartition("-")[0]
        per_stage[stage] += int(ack.get("records_in") or 0)
        if ack.get("busy_cpu_s"):
            cpu.setdefault(stage, []).append(float(ack["busy_cpu_s"]))
    rates = {s.name: round(per_stage[s.name] / span, 1) for s in graph.stages}
    busy = {name: round(min(1.0, sum(v) / len(v) / span), 3) for name, v in cpu.items()}
    return rates, busy
