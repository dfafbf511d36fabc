"""Checkpoint records validated before the coordinator or `processor savepoint` use them, and
bad internal records counted and logged (issue 25: one bad record crash-looped the
coordinator)."""

from __future__ import annotations

import json
import logging

import pytest

from processor import metrics
from processor.checkpointing.coordinator import CompletedCheckpoint
from processor.models.control import Ack
from processor.models.internal import SkippedRecords, checkpoint_record


def test_a_completed_checkpoint_round_trips() -> None:
    ack = Ack("count-0", 7, "w1", 10, 2, 0, {"0": 5, "1": 9}, state_bytes=100, snapshot="x")
    done = CompletedCheckpoint(7, 1.0, 2.0, {"count-0": ack})
    record = done.to_json()
    assert checkpoint_record(json.dumps(record).encode()) == record


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b"null",
        b"{}",
        b'{"id": 3}',  # no tasks
        b'{"tasks": {}}',  # no id
        b'{"id": "3", "tasks": {}}',
        b'{"id": 0, "tasks": {}}',
        b'{"id": -1, "tasks": {}}',
        b'{"id": 3.5, "tasks": {}}',
        b'{"id": 3, "tasks": []}',
        b'{"id": 3, "tasks": {"a-0": 1}}',
        b'{"id": 3, "tasks": {"a-0": {"positions": {"0": "5"}}}}',
        b'{"id": 3, "tasks": {"a-0": {"positions": []}}}',
        b'{"id": 3, "tasks": {"a-0": {"worker": null}}}',
    ],
)
def test_anything_else_is_no_checkpoint(raw: bytes) -> None:
    assert checkpoint_record(raw) is None


def test_skipped_records_are_counted_and_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skipped = SkippedRecords("job-x", "job-x.control")
    counter = metrics.internal_records_skipped.labels(job_name="job-x", topic="job-x.control")
    before = counter._value.get()
    with caplog.at_level(logging.WARNING, logger="processor.models.internal"):
        for offset in range(3):
            skipped.skip(b'{"kind": "heartbeat", "worker": 1}', offset)
    assert counter._value.get() == before + 3
    assert len(caplog.records) == 1
    assert "job-x.control" in caplog.text and "offset 0" in caplog.text
