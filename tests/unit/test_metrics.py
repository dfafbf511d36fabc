"""Metrics hygiene: a task that leaves a process leaves no frozen gauges behind."""

from __future__ import annotations

from prometheus_client import REGISTRY

from processor import metrics


def _samples(job: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (s.name, dict(s.labels))
        for family in REGISTRY.collect()
        for s in family.samples
        if s.labels.get("processor_job") == job
    ]


def test_forget_task_drops_its_gauges_only() -> None:
    job = "metrics-test"
    metrics.consumer_lag.labels(processor_job=job, task="count-0", partition="0").set(5)
    metrics.consumer_lag.labels(processor_job=job, task="count-1", partition="1").set(7)
    metrics.state_keys.labels(processor_job=job, task="count-0").set(100)
    metrics.records_in.labels(processor_job=job, task="count-0").inc(3)
    metrics.forget_task(job, "count-0")
    left = _samples(job)
    assert (
        "processor_consumer_lag_records",
        {"processor_job": job, "task": "count-1", "partition": "1"},
    ) in left
    assert not any(
        name in ("processor_consumer_lag_records", "processor_state_keys")
        and labels.get("task") == "count-0"
        for name, labels in left
    )
    # Counters stay: a rate over them is still right.
    assert ("processor_records_in_total", {"processor_job": job, "task": "count-0"}) in left
