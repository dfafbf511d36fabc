"""Metrics hygiene: a task that leaves a process leaves no frozen gauges behind."""

from __future__ import annotations

import re

from prometheus_client import REGISTRY

from processor import metrics


def _samples(job: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (s.name, dict(s.labels))
        for family in REGISTRY.collect()
        for s in family.samples
        if s.labels.get("job_name") == job
    ]


def test_forget_task_drops_its_gauges_only() -> None:
    job = "metrics-test"
    metrics.consumer_lag.labels(job_name=job, task="count-0", partition="0").set(5)
    metrics.consumer_lag.labels(job_name=job, task="count-1", partition="1").set(7)
    metrics.state_keys.labels(job_name=job, task="count-0").set(100)
    metrics.records_in.labels(job_name=job, task="count-0").inc(3)
    metrics.forget_task(job, "count-0")
    left = _samples(job)
    assert (
        "processor_consumer_lag_records",
        {"job_name": job, "task": "count-1", "partition": "1"},
    ) in left
    assert not any(
        name in ("processor_consumer_lag_records", "processor_state_keys")
        and labels.get("task") == "count-0"
        for name, labels in left
    )
    # Counters stay: a rate over them is still right.
    assert ("processor_records_in_total", {"job_name": job, "task": "count-0"}) in left


def test_metric_names_follow_prometheus_conventions() -> None:
    """Base units (seconds, bytes: never ms), no label Prometheus sets on a target itself
    (``job``, ``instance``: a series's own would need honor_labels), the processor job as
    ``job_name`` on every series."""
    from prometheus_client.metrics import MetricWrapperBase

    found = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    assert len(found) > 30
    for metric in found:
        name = metric._name
        assert name.startswith("processor_"), name
        assert not re.search(r"_(ms|millis|milliseconds|kb|mb|minutes)(_|$)", name), name
        labels = metric._labelnames
        assert not {"job", "instance"} & set(labels), (name, labels)
        assert labels[:1] == ("job_name",), (name, labels)
