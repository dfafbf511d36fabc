"""The chaos run in its short CI mode (the long run: python -m tests.chaos)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.chaos import run_chaos


def test_chaos_short(tmp_path: Path) -> None:
    summary = run_chaos(tmp_path, words=600_000, faults=10, seed=7, broker_restart=True)
    report = summary.to_json()
    print(json.dumps(report))
    assert summary.faults["broker restart"] == 1
    assert sum(summary.faults.values()) == 10
    assert summary.records_verified > 0
    assert (summary.lost, summary.duplicated, summary.unknown) == (0, 0, 0), report


def test_chaos_short_with_s3_storage_and_an_outage(tmp_path: Path) -> None:
    summary = run_chaos(tmp_path, words=400_000, faults=8, seed=3, broker_restart=False, s3=True)
    report = summary.to_json()
    print(json.dumps(report))
    assert summary.faults["S3 outage"] == 1
    assert summary.records_verified > 0
    assert (summary.lost, summary.duplicated, summary.unknown) == (0, 0, 0), report
