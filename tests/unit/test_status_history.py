"""The status page's hour: bucketed checkpoints and per-task sparklines."""

from __future__ import annotations

from typing import Any

from processor.coordinator.status import page as status
from processor.coordinator.status.history import HOUR_S, MAX_POINTS, StatusHistory


def record(n: int, at: float, per_task: dict[str, int], alignment: float = 0.0) -> dict[str, Any]:
    return {
        "id": n,
        "completed_at": at,
        "duration_s": 0.1 * n,
        "uploaded_bytes": 1000 * n,
        "records_in": sum(per_task.values()),
        "tasks": {t: {"records_in": r, "alignment_s": alignment} for t, r in per_task.items()},
    }


def test_rates_come_from_the_span_between_checkpoints_and_lags_from_the_tasks() -> None:
    hour = StatusHistory()
    hour.completed(record(1, 100.0, {"a-0": 50, "b-0": 10}), {"a-0": 7})
    hour.completed(record(2, 102.0, {"a-0": 400, "b-0": 20}), {"a-0": 3, "b-0": 0})
    lines = hour.sparklines(now=103.0)
    assert lines["a-0"] == {"records_per_s": [200.0], "lag": [7.0, 3.0]}
    assert lines["b-0"] == {"records_per_s": [10.0], "lag": [0.0]}


def test_buckets_keep_the_longest_duration_and_alignment_and_count_failures() -> None:
    hour = StatusHistory()
    for n in range(1, 11):
        hour.completed(record(n, 1000.0 + n, {"a-0": 1}, alignment=0.01 * n), {})
    hour.failed(11, 1011.5)
    buckets = hour.checkpoints(now=1011.0, buckets=2)
    assert [b["completed"] for b in buckets] == [5, 5]
    assert buckets[1]["failed"] == 1 and buckets[1]["last"] == 11
    assert buckets[0]["duration_s"] == 0.5 and buckets[1]["duration_s"] == 1.0
    assert buckets[1]["alignment_s"] == 0.1
    assert sum(b["size_bytes"] for b in buckets) == 1000 * sum(range(1, 11))


def test_an_hour_is_kept_and_no_more() -> None:
    hour = StatusHistory()
    hour.completed(record(1, 0.0, {"gone-0": 1}), {})
    hour.completed(record(2, HOUR_S + 10, {"a-0": 1}), {})
    assert [p.checkpoint for p in hour.checkpoint_points] == [2]
    assert set(hour.task_points) == {"a-0"}  # a task rescaled away leaves with its hour
    for n in range(3, MAX_POINTS + 100):
        hour.completed(record(n, HOUR_S + 10 + n * 0.1, {"a-0": 1}), {})
    assert len(hour.checkpoint_points) == MAX_POINTS
    assert len(hour.checkpoints(now=HOUR_S + 500, buckets=120)) <= 120
    assert len(hour.sparklines(now=HOUR_S + 500, points=60)["a-0"]["records_per_s"]) <= 60


def test_a_restarted_coordinator_rebuilds_the_hour_from_its_history() -> None:
    hour = StatusHistory()
    hour.rebuild([record(2, 20.0, {"a-0": 30}), record(1, 10.0, {"a-0": 5})])
    assert [p.checkpoint for p in hour.checkpoint_points] == [1, 2]
    assert hour.sparklines(now=21.0)["a-0"]["records_per_s"] == [3.0]


def test_the_page_draws_the_hour_and_a_sparkline_per_task() -> None:
    hour = StatusHistory()
    for n in range(1, 5):
        hour.completed(record(n, 10.0 * n, {"a-0": 10 * n}, alignment=0.02), {"a-0": n})
    doc = {
        "job": "j",
        "checkpoints": {"history": [], "hour": hour.checkpoints(now=41.0)},
        "tasks": [{"task": "a-0", "state": "running", "hour": hour.sparklines(now=41.0)["a-0"]}],
    }
    page = status.render_html(doc)
    assert page.count('class="duration"') == 4 and page.count('class="alignment"') == 4
    assert page.count('<svg class="spark"') == 2  # records/s and lag
    assert "Checkpoints, last hour" in page
