"""Records of the job's internal topics, validated before anything acts on them.

``<job>.control`` and ``<job>.checkpoints`` are written by this project's own processes, but
anyone with write access to them (a user's ``sink("<job>.control")``, a tool, a newer or
broken version) can put anything there. A record that is not what its reader expects is
skipped, counted (``processor_internal_records_skipped_total``) and logged, never raised: one
bad record must not crash-loop the coordinator or stall the job.

Validation is pydantic's, strict (no ``"3"`` for 3) and forward compatible (unknown fields
are ignored)::

    >>> checkpoint_record(b'{"id": 3, "tasks": {}}')
    {'id': 3, 'tasks': {}}
    >>> checkpoint_record(b'{"id": "x"}') is None
    True
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from processor import metrics
from processor.models.control import Count, Offset, Seconds, WallTime
from processor.models.limits import MAX_CLOCK_SKEW_S, MAX_ID, MAX_ID_JUMP

log = logging.getLogger(__name__)

WARN_EVERY_S = 60.0  # per topic: a flood of bad records logs a line a minute, with its count


class TaskEntry(TypedDict, total=False):
    """One task of a completed checkpoint (``CompletedCheckpoint.to_json``)."""

    worker: str
    positions: dict[str, Offset]
    snapshot: str | None
    owner: str | None
    state_bytes: Count
    uploaded_bytes: Count
    alignment_s: Seconds
    sync_s: Seconds
    upload_s: Seconds
    commit_s: Seconds
    records_in: Count
    busy_cpu_s: Seconds


class CheckpointRecord(TypedDict, total=False):
    """A record of ``<job>.checkpoints``: one completed checkpoint."""

    id: Annotated[int, Field(ge=1, le=MAX_ID)]
    triggered_at: WallTime
    completed_at: WallTime
    duration_s: Seconds
    uploaded_bytes: Count
    state_bytes: Count
    records_in: Count
    tasks: dict[str, TaskEntry]


_CHECKPOINT = TypeAdapter(CheckpointRecord)


def checkpoint_record(raw: bytes) -> dict[str, Any] | None:
    """The completed checkpoint ``raw`` records, or None when it is not one."""
    try:
        record = _CHECKPOINT.validate_json(raw, strict=True)
    except ValidationError:
        return None
    if "id" not in record or "tasks" not in record:
        return None
    return dict(record)


def plausible_history(
    records: list[dict[str, Any]], now_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The completed checkpoints (`checkpoint_record`) that can be this job's, by id, and
    the others. Ids grow from 0 by one per trigger, and at most `MAX_ID_JUMP` between two
    completed checkpoints (the failed ones between them): a record whose id is further above
    the one below it (the first: above 0) was not written by the job's coordinator, nor is
    any record above it; nor is one that completed more than `MAX_CLOCK_SKEW_S` from now.

    >>> kept, dropped = plausible_history([{"id": 3}, {"id": 2**62}, {"id": 4}], 0.0)
    >>> [r["id"] for r in kept], [r["id"] for r in dropped]
    ([3, 4], [4611686018427387904])
    """
    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    below: int | None = 0  # None: an id jumped, so every record above is dropped
    for record in sorted(records, key=lambda r: int(r["id"])):
        if below is not None and int(record["id"]) - below > MAX_ID_JUMP:
            below = None
        if below is None or float(record.get("completed_at", 0.0)) > now_s + MAX_CLOCK_SKEW_S:
            dropped.append(record)
        else:
            kept.append(record)
            below = int(record["id"])
    return kept, dropped


class SkippedRecords:
    """Counts and logs the bad records one reader of one internal topic skips."""

    def __init__(self, job: str, topic: str) -> None:
        self.topic = topic
        self._counter = metrics.internal_records_skipped.labels(job_name=job, topic=topic)
        self._since_warning = 0
        self._warned_at = -WARN_EVERY_S

    def skip(self, raw: bytes, offset: int | None) -> None:
        self._counter.inc()
        self._since_warning += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            log.warning(
                "skipped %d record(s) of %s that are not valid (the last at offset %s: %r); "
                "only this job's own processes should write there",
                self._since_warning,
                self.topic,
                offset,
                raw[:120],
            )
            self._warned_at = now
            self._since_warning = 0
