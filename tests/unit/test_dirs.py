"""Private local directories (issue 25, item 5): per-user defaults, 0700, and a symlink or
another user's directory refused in one line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from processor.config import Settings, SettingsError, default_state_root
from processor.state.dirs import private_dir
from processor.worker.task import local_dir


def test_the_defaults_are_per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_root() == tmp_path / "xdg" / "processor"
    settings = Settings()
    assert settings.state_dir == tmp_path / "xdg" / "processor" / "state"
    assert settings.checkpoint_dir == tmp_path / "xdg" / "processor" / "checkpoints"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_root() == Path.home() / ".local" / "state" / "processor"


def test_what_it_creates_is_private(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "state", "PROCESSOR_STATE_DIR")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    settings = Settings(state_dir=made, job_name="j")
    task = local_dir(settings, "count-0")
    for path in (made / "j", made / "j" / "count-0", task):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(SettingsError, match=r"PROCESSOR_STATE_DIR: .*link is a symbolic link"):
        private_dir(tmp_path / "link", "PROCESSOR_STATE_DIR")


def test_a_symlink_planted_inside_the_state_dir_is_refused(tmp_path: Path) -> None:
    """A task's cleanup removes digit-named entries of its directory: never through a link."""
    state = private_dir(tmp_path / "state", "PROCESSOR_STATE_DIR")
    (tmp_path / "victim").mkdir()
    (state / "j").symlink_to(tmp_path / "victim")
    with pytest.raises(SettingsError, match="symbolic link"):
        local_dir(Settings(state_dir=state, job_name="j"), "count-0")


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_another_users_directory_is_refused_and_roots_is_fine(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, 12345, 12345)
    with pytest.raises(SettingsError, match="belongs to uid 12345"):
        private_dir(planted, "PROCESSOR_CHECKPOINT_DIR")
    os.chown(planted, 0, 0)
    assert private_dir(planted, "PROCESSOR_CHECKPOINT_DIR") == planted
