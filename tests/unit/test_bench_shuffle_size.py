"""bench/shuffle_size.py's storage count: it must survive retention deleting snapshots while
it walks the checkpoint directory (CI once failed on a directory that vanished mid-walk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import shuffle_size


def _tree(root: Path) -> None:
    for snapshot in ("chk-1", "chk-2"):
        d = root / "count-0" / "g1" / snapshot
        d.mkdir(parents=True)
        (d / "000001.sst").write_bytes(b"x" * 100)
        (d / "_snapshot.json").write_bytes(b"{}")


def test_counts_bytes_and_snapshots(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert shuffle_size.storage_size(tmp_path) == {"storage_bytes": 204, "snapshots": 2}


def test_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert shuffle_size.storage_size(tmp_path / "absent") == {"storage_bytes": 0, "snapshots": 0}


def test_a_directory_deleted_during_the_walk_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    gone = tmp_path / "count-0" / "g1" / "chk-2"
    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(path) == gone:  # retention deleted it after its parent was listed
            for f in gone.iterdir():
                f.unlink()
            gone.rmdir()
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert shuffle_size.storage_size(tmp_path) == {"storage_bytes": 102, "snapshots": 1}
