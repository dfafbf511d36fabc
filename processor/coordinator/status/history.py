"""The last hour of the job, for the status page: each checkpoint's duration, alignment and
size, and each task's records/s and lag at each checkpoint.

The coordinator keeps its recent completed checkpoints (`CheckpointJournal.history`, 100 of
them) for recovery; at one checkpoint a second that is under two minutes, so the page's hour
is kept here, in memory, and rebuilt from that history after a coordinator restart. It is
bounded twice: by age (an hour) and by count (`MAX_POINTS` per series), so a job that
checkpoints every 100 ms keeps the most recent points. What the page shows is bucketed
(`checkpoints`, `sparklines`): a fixed number of points whatever the interval.

Pure: times are given (wall-clock seconds), no I/O.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HOUR_S = 3600.0
MAX_POINTS = 4000  # per series: an hour of checkpoints at one a second, and some


@dataclass(frozen=True)
class CheckpointPoint:
    at: float  # wall-clock seconds
    checkpoint: int
    failed: bool
    duration_s: float = 0.0
    alignment_s: float = 0.0  # the slowest task's
    size_bytes: int = 0  # uploaded
    records_in: int = 0


@dataclass(frozen=True)
class TaskPoint:
    at: float
    records_per_s: float | None  # None at a task's first checkpoint here: no span yet
    lag: int | None


class StatusHistory:
    """An hour of checkpoints and of per-task rates and lags, newest last."""

    def __init__(self) -> None:
        self.checkpoint_points: collections.deque[CheckpointPoint] = collections.deque(
            maxlen=MAX_POINTS
        )
        self.task_points: dict[str, collections.deque[TaskPoint]] = {}
        self._last_completed_at: float | None = None

    def completed(self, record: Mapping[str, Any], lags: Mapping[str, int | None]) -> None:
        """A completed checkpoint's record (`CompletedCheckpoint.to_json`), with the lag each
        task reported last."""
        at = float(record.get("completed_at") or 0.0)
        tasks: Mapping[str, Mapping[str, Any]] = record.get("tasks") or {}
        alignment = (float(a.get("alignment_s") or 0.0) for a in tasks.values())
        self.checkpoint_points.append(
            CheckpointPoint(
                at=at,
                checkpoint=int(record["id"]),
                failed=False,
                duration_s=float(record.get("duration_s") or 0.0),
                alignment_s=max(alignment, default=0.0),
                size_bytes=int(record.get("uploaded_bytes") or 0),
                records_in=int(record.get("records_in") or 0),
            )
        )
        before = self._last_completed_at
        span = at - before if before is not None else 0.0
        for task, ack in tasks.items():
            rate = int(ack.get("records_in") or 0) / span if span > 0 else None
            points = self.task_points.setdefault(task, collections.deque(maxlen=MAX_POINTS))
            points.append(TaskPoint(at, rate, lags.get(task)))
        self._last_completed_at = at
        self._forget(at)

    def failed(self, checkpoint: int, at: float) -> None:
        self.checkpoint_points.append(CheckpointPoint(at=at, checkpoint=checkpoint, failed=True))
        self._forget(at)

    def rebuild(self, records: Iterable[Mapping[str, Any]]) -> None:
        """After a coordinator restart: the completed checkpoints it read back (no lags)."""
        for record in sorted(records, key=lambda r: float(r.get("completed_at") or 0.0)):
            self.completed(record, {})

    def checkpoints(self, now: float, buckets: int = 120) -> list[dict[str, Any]]:
        """The hour's checkpoints in at most ``buckets`` buckets of equal time, oldest first:
        per bucket its index (``bucket`` of ``of``, over ``span_s``), the longest duration and
        alignment, the bytes uploaded, the records read, and how many checkpoints completed
        and failed in it. Empty buckets are left out."""
        points = [p for p in self.checkpoint_points if p.at > now - HOUR_S]
        if not points:
            return []
        start = points[0].at
        width = max((now - start) / buckets, 1e-3)
        out: dict[int, dict[str, Any]] = {}
        for p in points:
            b = min(int((p.at - start) / width), buckets - 1)
            cell = out.setdefault(
                b,
                {
                    "bucket": b,
                    "of": buckets,
                    "span_s": round(now - start, 3),  # what the buckets cover, to now
                    "at": round(start + b * width, 3),
                    "last": p.checkpoint,
                    "completed": 0,
                    "failed": 0,
                    "duration_s": 0.0,
                    "alignment_s": 0.0,
                    "size_bytes": 0,
                    "records_in": 0,
                },
            )
            cell["last"] = p.checkpoint
            if p.failed:
                cell["failed"] += 1
                continue
            cell["completed"] += 1
            cell["duration_s"] = max(cell["duration_s"], p.duration_s)
            cell["alignment_s"] = max(cell["alignment_s"], p.alignment_s)
            cell["size_bytes"] += p.size_bytes
            cell["records_in"] += p.records_in
        return [out[b] for b in sorted(out)]

    def sparklines(self, now: float, points: int = 60) -> dict[str, dict[str, list[float]]]:
        """Per task, its records/s and lag over the hour in at most ``points`` values, oldest
        first (per bucket the mean rate and the largest lag)."""
        lines: dict[str, dict[str, list[float]]] = {}
        for task, series in self.task_points.items():
            recent = [p for p in series if p.at > now - HOUR_S]
            if not recent:
                continue
            start = recent[0].at
            width = max((now - start) / points, 1e-3)
            rates: dict[int, list[float]] = {}
            lags: dict[int, int] = {}
            for p in recent:
                b = min(int((p.at - start) / width), points - 1)
                if p.records_per_s is not None:
                    rates.setdefault(b, []).append(p.records_per_s)
                if p.lag is not None:
                    lags[b] = max(lags.get(b, 0), p.lag)
            lines[task] = {
                "records_per_s": [round(sum(r) / len(r), 1) for _, r in sorted(rates.items())],
                "lag": [float(v) for _, v in sorted(lags.items())],
            }
        return lines

    def _forget(self, now: float) -> None:
        while self.checkpoint_points and self.checkpoint_points[0].at <= now - HOUR_S:
            self.checkpoint_points.popleft()
        for task in list(self.task_points):
            series = self.task_points[task]
            while series and series[0].at <= now - HOUR_S:
                series.popleft()
            if not series:
                del self.task_points[task]  # a task gone (rescaled away) for an hour
