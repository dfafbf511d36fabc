"""tests/chaos.py keeps a failed run's directory under PROCESSOR_TEST_CHAOS_KEEP."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import KEEP_ENV, _keep


def test_a_failed_run_is_copied_whole_under_the_keep_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    segment = run / "kafka" / "data" / "job.shuffle-7" / "00000000000000000000.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(b"batches")
    monkeypatch.setenv(KEEP_ENV, str(tmp_path / "kept"))
    _keep(run, seed=7)
    (kept,) = (tmp_path / "kept").iterdir()
    assert kept.name.startswith("chaos-seed7-")
    assert (kept / segment.relative_to(run)).read_bytes() == b"batches"


def test_nothing_is_kept_without_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEEP_ENV, raising=False)
    _keep(tmp_path, seed=7)
    assert list(tmp_path.iterdir()) == []
