"""SnapshotProcess: a task's SnapshotStore in a child process (no broker needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.config import Settings
from processor.state.rocksdb.snapshot_process import SnapshotProcess, SnapshotProcessDied
from processor.state.rocksdb.snapshots import MANIFEST_NAME, SnapshotAborted, SnapshotRef
from processor.state.rocksdb.store import RocksDBStore
from processor.state.storage import SnapshotMissing

PREFIX = "job/task-0"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(checkpoint_dir=tmp_path / "storage")


@pytest.fixture
def snapshots(settings: Settings) -> Iterator[SnapshotProcess]:
    process = SnapshotProcess(settings, PREFIX, "task-0")
    try:
        yield process
    finally:
        process.close()


def _checkpoint(tmp_path: Path, rows: dict[bytes, bytes], name: str) -> Path:
    with RocksDBStore(tmp_path / "db") as store:
        store.write(rows)
        store.checkpoint(tmp_path / name)
    return tmp_path / name


def _many_files(tmp_path: Path, n: int) -> Path:
    """A flat directory the store uploads file by file: long enough to stop in the middle."""
    directory = tmp_path / "many"
    directory.mkdir()
    for i in range(n):
        (directory / f"OPTIONS-{i:06d}").write_bytes(os.urandom(512))
    return directory


def _gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _manifests(settings: Settings) -> list[Path]:
    return list(Path(str(settings.checkpoint_dir)).rglob(MANIFEST_NAME))


def test_upload_retain_and_restore_round_trip(snapshots: SnapshotProcess, tmp_path: Path) -> None:
    owner = snapshots.open(None)
    assert owner == snapshots.owner and owner.startswith("g0000000001-")
    rows = {f"k{i}".encode(): f"v{i}".encode() for i in range(1000)}
    local = _checkpoint(tmp_path, rows, "chk-1")
    info = snapshots.upload(1, local, {"positions": {"0": 7}}).result()
    assert info.ref == SnapshotRef(1, owner)
    assert info.meta == {"positions": {"0": 7}}
    assert not local.exists()  # the child removes the local checkpoint, as the store does
    assert list(snapshots.retain(info.ref, 2).result()) == [info.ref]
    assert snapshots.snapshots() == [info.ref]
    restored = snapshots.restore(info.ref, tmp_path / "restored")
    assert restored.meta == {"positions": {"0": 7}}
    with RocksDBStore(tmp_path / "restored") as store:
        assert dict(store.items()) == rows


def test_a_new_incarnation_takes_a_higher_generation(
    settings: Settings, snapshots: SnapshotProcess, tmp_path: Path
) -> None:
    first = snapshots.open(None)
    info = snapshots.upload(1, _checkpoint(tmp_path, {b"a": b"1"}, "chk-1"), {}).result()
    successor = SnapshotProcess(settings, PREFIX, "task-0")
    try:
        second = successor.open(info.ref)
    finally:
        successor.close()
    assert second.startswith("g0000000002-") and first.startswith("g0000000001-")


def test_the_stores_exceptions_reach_the_task(snapshots: SnapshotProcess, tmp_path: Path) -> None:
    owner = snapshots.open(None)
    with pytest.raises(SnapshotMissing, match="manifest missing"):
        snapshots.restore(SnapshotRef(5, owner), tmp_path / "restored")
    not_flat = tmp_path / "chk-2"
    (not_flat / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match="not a flat RocksDB checkpoint"):
        snapshots.upload(2, not_flat, {}).result()
    # The child goes on serving after a failed call.
    assert snapshots.snapshots() == []


def test_a_call_before_open_is_refused(snapshots: SnapshotProcess) -> None:
    with pytest.raises(ValueError, match="before open"):
        snapshots.snapshots()


def test_close_stops_an_upload_at_its_next_file(
    settings: Settings, snapshots: SnapshotProcess, tmp_path: Path
) -> None:
    snapshots.open(None)
    future = snapshots.upload(1, _many_files(tmp_path, 20_000), {})
    time.sleep(0.3)  # under way
    assert not future.done()
    queued = snapshots.retain(SnapshotRef(1, snapshots.owner), 2)
    snapshots.close()
    with pytest.raises(SnapshotAborted):
        future.result(timeout=5)
    with pytest.raises(SnapshotAborted):
        queued.result(timeout=5)
    assert _manifests(settings) == []  # the snapshot never became complete
    assert _gone(snapshots.pid)
    # It stopped at a file boundary as asked, rather than being killed after the timeout.
    assert snapshots.exit_code == 0
    with pytest.raises(SnapshotAborted):
        snapshots.upload(2, tmp_path, {}).result()
    snapshots.close()  # twice is harmless


def test_a_dead_child_fails_its_calls(snapshots: SnapshotProcess, tmp_path: Path) -> None:
    snapshots.open(None)
    future = snapshots.upload(1, _many_files(tmp_path, 20_000), {})
    time.sleep(0.3)
    os.kill(snapshots.pid, signal.SIGKILL)
    with pytest.raises(SnapshotProcessDied, match="exit code -9"):
        future.result(timeout=20)
    with pytest.raises(SnapshotProcessDied):
        snapshots.snapshots()


def _parent(tmp_path: Path, body: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A task process of its own that starts a SnapshotProcess and runs ``body``."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from processor.config import Settings
        from processor.state.rocksdb.snapshot_process import SnapshotProcess
        tmp = Path({str(tmp_path)!r})
        snapshots = SnapshotProcess(Settings(checkpoint_dir=tmp / "storage"), {PREFIX!r}, "t")
        snapshots.open(None)
        print(snapshots.pid, flush=True)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_the_child_stops_when_its_task_process_dies(settings: Settings, tmp_path: Path) -> None:
    many = _many_files(tmp_path, 20_000)
    parent = _parent(
        tmp_path,
        f"""
        snapshots.upload(1, Path({str(many)!r}), {{}})
        time.sleep(0.3)
        print("uploading", flush=True)
        time.sleep(60)
        """,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "uploading"
    parent.kill()
    parent.wait()
    assert _gone(child)
    assert _manifests(settings) == []  # it stopped before the manifest


def test_a_fault_point_in_the_child_kills_the_task_process(tmp_path: Path) -> None:
    local = _checkpoint(tmp_path, {b"a": b"1"}, "chk-1")
    parent = _parent(
        tmp_path,
        f"""
        snapshots.upload(1, Path({str(local)!r}), {{}}).result()
        print("survived", flush=True)
        """,
        env={"PROCESSOR_FAULT": "snapshot_uploading"},
    )
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == -signal.SIGKILL
    assert "survived" not in out
    assert "fault point snapshot_uploading reached" in err
    assert _gone(int(out.split()[0]))


def test_the_child_starts_without_the_settings_models() -> None:
    """Four keyed tasks start four of these per job: what their imports cost is paid per
    run (0.21 s of CPU each with the settings' pydantic models and the API, 0.07 without)."""
    code = (
        "import sys, processor.state.rocksdb.snapshot_process as m, processor.state.factory\n"
        "print(sorted(n for n in ('pydantic', 'processor.config', 'processor.api') "
        "if n in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_an_s3_location_reaches_the_child_with_its_credentials(tmp_path: Path) -> None:
    """`StorageSpec` carries the S3 settings (SecretStr) only for an S3 location."""
    from processor.config import S3Location
    from processor.state.factory import StorageSpec

    spec = StorageSpec.of(
        Settings(
            checkpoint_dir=S3Location("bucket", "p"),
            s3_access_key_id="id",  # type: ignore[arg-type]
            s3_secret_access_key="secret",  # type: ignore[arg-type]
        )
    )
    assert spec.location == S3Location("bucket", "p")
    assert spec.s3 is not None and spec.s3["access_key_id"].get_secret_value() == "id"
    assert StorageSpec.of(Settings(checkpoint_dir=tmp_path)).s3 is None
