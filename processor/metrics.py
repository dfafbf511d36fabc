"""Prometheus metrics of the coordinator and the workers (names are a public interface).

Every series of the engine carries the processor job's name as ``job_name`` (not
``job``: that is the target label Prometheus sets from its scrape config, and a series's own
``job`` survives only with ``honor_labels``, which the Prometheus Operator can override).
Values are in base units: seconds, bytes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from processor.config import SettingsError
from processor.health import LoopHealth
from processor.http_server import Request, Response

_JOB = ["job_name"]
_TASK = [*_JOB, "task"]
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

records_in = Counter(
    "processor_records_in",
    "Records read by a task (keyed tasks: the partial counts the shuffle records carry)",
    _TASK,
)
records_out = Counter(
    "processor_records_out",
    "Records written by a task (source tasks: partial counts, many to a shuffle record)",
    _TASK,
)
internal_records_skipped = Counter(
    "processor_internal_records_skipped",
    "Records of the job's internal topics (control, checkpoints) skipped as not valid",
    [*_JOB, "topic"],
)
records_skipped = Counter(
    "processor_records_skipped", "Bad input records skipped, by reason", [*_TASK, "reason"]
)
consumer_lag = Gauge(
    "processor_consumer_lag_records", "Records left in an input partition", [*_TASK, "partition"]
)
watermark_seconds = Gauge(
    "processor_watermark_seconds",
    "A task's event-time watermark (seconds since the epoch): records older than it are late",
    _TASK,
)
event_time_lag_seconds = Gauge(
    "processor_event_time_lag_seconds",
    "Wall time minus a task's watermark, at its last checkpoint",
    _TASK,
)
late_records = Counter(
    "processor_late_records",
    "Records a window or join got after the watermark passed them (written to <job>.late)",
    [*_TASK, "operator"],
)
alignment_seconds = Histogram(
    "processor_checkpoint_alignment_seconds",
    "First to last barrier of a checkpoint at a task",
    _TASK,
    buckets=_DURATION_BUCKETS,
)
start_delay_seconds = Histogram(
    "processor_checkpoint_start_delay_seconds",
    "Trigger of a checkpoint to its first barrier at a task",
    _TASK,
    buckets=_DURATION_BUCKETS,
)
snapshot_upload_seconds = Histogram(
    "processor_snapshot_upload_seconds",
    "Copy of a snapshot to checkpoint storage",
    _TASK,
    buckets=_DURATION_BUCKETS,
)
transaction_commit_seconds = Histogram(
    "processor_transaction_commit_seconds",
    "Kafka transaction commit",
    _TASK,
    buckets=_DURATION_BUCKETS,
)
state_keys = Gauge("processor_state_keys", "Keys in a task's state (estimate)", _TASK)
state_size_bytes = Gauge("processor_state_size_bytes", "Size of a task's last snapshot", _TASK)
snapshot_failures = Counter(
    "processor_snapshot_failures", "Snapshots that could not be taken or stored", _TASK
)
snapshot_failures_in_a_row = Gauge(
    "processor_snapshot_failures_in_a_row",
    "Consecutive failed snapshots of a task (the task fails past the tolerated number)",
    _TASK,
)
restores_total = Counter("processor_restores", "Task restores from a snapshot", _TASK)
last_restore_seconds = Gauge(
    "processor_last_restore_duration_seconds", "Duration of a task's last restore", _TASK
)
task_failed_permanently = Counter(
    "processor_task_failed_permanently",
    "Tasks stopped for good (not restarted), by reason: records_deleted = records a committed "
    "position still needs were deleted (retention); channels_changed = its snapshot was taken "
    "with other upstream tasks (a source topic gained partitions)",
    [*_TASK, "reason"],
)
task_stopped = Gauge(
    "processor_task_stopped",
    "1 for a task stopped on a failing record (PROCESSOR_ON_ERROR=stop), by the record's "
    "reason (function_error, not_json...): it is not restarted where it stopped",
    [*_TASK, "reason"],
)
shuffle_purges = Counter(
    "processor_shuffle_purges",
    "delete_records calls on the shuffle topic, by outcome (ok, failed)",
    [*_JOB, "outcome"],
)
shuffle_log_start_offset = Gauge(
    "processor_shuffle_log_start_offset",
    "Log start offset of a shuffle partition after this worker's last purge",
    [*_JOB, "partition"],
)

checkpoints_completed = Counter("processor_checkpoints_completed", "Completed checkpoints", _JOB)
checkpoints_failed = Counter("processor_checkpoints_failed", "Failed checkpoints", _JOB)
checkpoints_in_progress = Gauge(
    "processor_checkpoints_in_progress",
    "Checkpoints triggered, not yet complete",
    _JOB,
)
last_checkpoint_duration = Gauge(
    "processor_last_checkpoint_duration_seconds", "Trigger to completion", _JOB
)
last_checkpoint_size = Gauge(
    "processor_last_checkpoint_size_bytes", "Bytes the last checkpoint uploaded", _JOB
)
last_checkpoint_full_size = Gauge(
    "processor_last_checkpoint_full_size_bytes",
    "Full size of the last checkpoint",
    _JOB,
)
last_completed_checkpoint_id = Gauge(
    "processor_last_completed_checkpoint_id",
    "Id of the last completed checkpoint",
    _JOB,
)
checkpoint_duration = Histogram(
    "processor_checkpoint_duration_seconds",
    "Trigger to completion",
    _JOB,
    buckets=_DURATION_BUCKETS,
)
workers_alive = Gauge("processor_workers_alive", "Workers with a recent heartbeat", _JOB)
state_requests = Counter(
    "processor_state_requests",
    "Queryable-state requests a worker answered (docs/query-state.md), by route and status",
    [*_JOB, "route", "status"],
)
state_request_seconds = Histogram(
    "processor_state_request_seconds",
    "Time a worker took to answer a queryable-state request (200s only)",
    [*_JOB, "route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


def forget_task(job: str, task: str) -> None:
    """Drop a task's gauges when it leaves this process.

    Left behind, a moved task's last lag or state size would stay frozen here and be
    counted twice in every sum over the job. Counters stay: rates over them are still right.
    """
    for gauge, names in (
        (consumer_lag, ("job_name", "task", "partition")),
        (state_keys, ("job_name", "task")),
        (state_size_bytes, ("job_name", "task")),
        (snapshot_failures_in_a_row, ("job_name", "task")),
        (last_restore_seconds, ("job_name", "task")),
    ):
        for family in gauge.collect():
            for sample in family.samples:
                if sample.labels.get("job_name") == job and sample.labels.get("task") == task:
                    with contextlib.suppress(KeyError):
                        gauge.remove(*(sample.labels[n] for n in names))


def forget_stopped(job: str, task: str) -> None:
    """A stopped task moved away from this process: whoever runs it next says."""
    for family in task_stopped.collect():
        for sample in family.samples:
            if sample.labels.get("job_name") == job and sample.labels.get("task") == task:
                with contextlib.suppress(KeyError):
                    task_stopped.remove(job, task, sample.labels["reason"])


def serve(
    port: int,
    host: str = "127.0.0.1",
    health: LoopHealth | None = None,
    worker: str = "",
    token: str = "",
    pages: Callable[[Request], Response | None] | None = None,
    hosts: frozenset[str] = frozenset(),
) -> None:
    """Serve /metrics and /healthz on host:port (port 0: not at all).

    ``worker``: the worker id, added as the ``worker`` label to every exported sample;
    ``pages``: other routes (a worker's queryable state), behind ``token`` if it is set.
    """
    if port:
        from processor import endpoints  # the HTTP server only where it is served

        try:
            labels = {"worker": worker} if worker else None
            # State reads may wait on a task: off the loop that answers /healthz.
            slow = ("/state/",) if pages is not None else ()
            endpoints.serve(host, port, health, labels, token, pages, slow, hosts)
        except OSError as exc:
            raise SettingsError(
                f"invalid setting PROCESSOR_METRICS_PORT: cannot serve {host}:{port} "
                f"({exc.strerror})"
            ) from None
