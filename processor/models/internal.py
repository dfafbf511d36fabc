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

log = logging.getLogger(__name__)

WARN_EVERY_S = 60.0  # per topic: a flood of bad records logs a line a minute, with its count


class TaskEntry(TypedDict, total=False):
    """One task of a completed checkpoint (``CompletedCheckpoint.to_json``)."""

    worker: str
    positions: dict[str, int]
    snapshot: str | None
    owner: str | None
    state_bytes: int
    uploaded_bytes: int
    alignment_s: float
    sync_s: float
    upload_s: float
    commit_s: float
    records_in: int
    busy_cpu_s: float


class CheckpointRecord(TypedDict, total=False):
    """A record of ``<job>.checkpoints``: one completed checkpoint."""

    id: Annotated[int, Field(ge=1)]
    triggered_at: float
    completed_at: float
    duration_s: float
    uploaded_bytes: int
    state_bytes: int
    records_in: int
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
