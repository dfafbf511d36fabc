"""The CheckpointStorage contract, checked on every storage (a directory, and S3 on the
session's real S3 API server), then what is particular to DirectoryStorage."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from processor.state.storage import CheckpointStorage, DirectoryStorage, SnapshotMissing


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.server)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    if request.param == "directory":
        return DirectoryStorage(tmp_path / "store")
    s3: CheckpointStorage = request.getfixturevalue("s3_storage")
    return s3


@pytest.fixture
def directory(tmp_path: Path) -> DirectoryStorage:
    return DirectoryStorage(tmp_path / "store")


def _all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_satisfies_protocol(directory: DirectoryStorage) -> None:
    as_protocol: CheckpointStorage = directory
    as_protocol.put_bytes("k", b"v")
    assert as_protocol.get_bytes("k") == b"v"


def test_bytes_roundtrip_and_overwrite(storage: CheckpointStorage) -> None:
    storage.put_bytes("job/task/chk-1/CURRENT", b"first")
    assert storage.get_bytes("job/task/chk-1/CURRENT") == b"first"
    storage.put_bytes("job/task/chk-1/CURRENT", b"second, longer")
    assert storage.get_bytes("job/task/chk-1/CURRENT") == b"second, longer"
    storage.put_bytes("job/task/chk-1/EMPTY", b"")
    assert storage.get_bytes("job/task/chk-1/EMPTY") == b""


def test_directory_keys_are_files(directory: DirectoryStorage) -> None:
    directory.put_bytes("job/task/chk-1/CURRENT", b"second, longer")
    assert (directory.root / "job/task/chk-1/CURRENT").read_bytes() == b"second, longer"


def test_file_roundtrip(storage: CheckpointStorage, tmp_path: Path) -> None:
    src = tmp_path / "src.sst"
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    storage.put_file("a/b/000001.sst", src)
    dest = tmp_path / "out.sst"
    storage.get_file("a/b/000001.sst", dest)
    assert dest.read_bytes() == data
    assert storage.exists("a/b/000001.sst")
    assert not storage.exists("a/b/000002.sst")
    assert not storage.exists("a/b")  # a "directory" is not an object


def test_immutable_file_outlives_its_source(storage: CheckpointStorage, tmp_path: Path) -> None:
    src = tmp_path / "000007.sst"
    src.write_bytes(b"sst bytes")
    storage.put_immutable_file("j/t/shared/000007.sst", src)
    src.unlink()  # what the uploader does with its local checkpoint afterwards
    assert storage.get_bytes("j/t/shared/000007.sst") == b"sst bytes"
    assert storage.list("") == ["j/t/shared/000007.sst"]


def test_immutable_file_is_linked_on_the_same_filesystem(
    directory: DirectoryStorage, tmp_path: Path
) -> None:
    storage = directory
    src = tmp_path / "000007.sst"
    src.write_bytes(b"sst bytes")
    storage.put_immutable_file("j/t/shared/000007.sst", src)
    stored = storage.root / "j" / "t" / "shared" / "000007.sst"
    assert stored.read_bytes() == b"sst bytes"
    assert os.path.samefile(stored, src)  # a link, no copy
    src.unlink()  # what the uploader does with its local checkpoint afterwards
    assert storage.get_bytes("j/t/shared/000007.sst") == b"sst bytes"
    assert _all_files(storage.root) == ["j/t/shared/000007.sst"]  # no staged leftovers


def test_immutable_file_is_copied_where_no_link_can_be_made(
    directory: DirectoryStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = directory

    def cross_device(src: object, dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    src = tmp_path / "MANIFEST-000005"
    src.write_bytes(b"manifest")
    storage.put_immutable_file("j/t/chk-1/MANIFEST-000005", src)
    stored = storage.root / "j" / "t" / "chk-1" / "MANIFEST-000005"
    assert stored.read_bytes() == b"manifest"
    assert not os.path.samefile(stored, src)
    assert _all_files(storage.root) == ["j/t/chk-1/MANIFEST-000005"]


def test_list_uses_string_prefixes(storage: CheckpointStorage) -> None:
    keys = [
        "j/t1/chk-000000000001/CURRENT",
        "j/t1/chk-000000000002/CURRENT",
        "j/t1/shared/s-000001.sst",
        "j/t10/chk-000000000001/CURRENT",
        "top",
    ]
    for key in keys:
        storage.put_bytes(key, b"x")
    assert storage.list("j/t1/") == keys[:3]
    assert storage.list("j/t1/chk-") == keys[:2]
    assert storage.list("j/t1") == keys[:4]
    assert storage.list("j/t1/chk-000000000002/") == [keys[1]]
    assert storage.list("") == sorted(keys)
    assert storage.list("nothing/here/") == []


def test_delete_is_idempotent(storage: CheckpointStorage) -> None:
    storage.put_bytes("j/t/chk-1/a", b"1")
    storage.put_bytes("j/t/shared/c", b"3")
    storage.delete("j/t/chk-1/a")
    storage.delete("j/t/chk-1/a")
    storage.delete("never/was/there")
    assert not storage.exists("j/t/chk-1/a")
    assert storage.list("") == ["j/t/shared/c"]
    storage.put_bytes("j/t/chk-1/a", b"again")
    assert storage.get_bytes("j/t/chk-1/a") == b"again"


def test_delete_prunes_empty_dirs(directory: DirectoryStorage) -> None:
    storage = directory
    storage.put_bytes("j/t/chk-1/a", b"1")
    storage.put_bytes("j/t/chk-1/b", b"2")
    storage.put_bytes("j/t/shared/c", b"3")
    storage.delete("j/t/chk-1/a")
    assert (storage.root / "j/t/chk-1").is_dir()  # still holds b
    storage.delete("j/t/chk-1/b")
    storage.delete("j/t/chk-1/b")
    storage.delete("never/was/there")
    assert not (storage.root / "j/t/chk-1").exists()
    assert (storage.root / "j/t/shared").is_dir()
    storage.delete("j/t/shared/c")
    assert storage.root.is_dir()
    assert list(storage.root.iterdir()) == []
    # A pruned directory is recreated by the next put.
    storage.put_bytes("j/t/chk-1/a", b"again")
    assert storage.get_bytes("j/t/chk-1/a") == b"again"


@pytest.mark.parametrize(
    "key",
    ["", "/abs", "../escape", "a/../../b", "a//b", "a/./b", "a/", ".tmp-x", "a/.tmp-1-b", "a\\b"],
)
def test_rejects_keys_outside_the_tree(
    storage: CheckpointStorage, key: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="invalid storage key"):
        storage.put_bytes(key, b"x")
    with pytest.raises(ValueError, match="invalid storage key"):
        storage.get_bytes(key)
    with pytest.raises(ValueError, match="invalid storage key"):
        storage.delete(key)
    with pytest.raises(ValueError, match="invalid storage key"):
        storage.exists(key)
    assert _all_files(tmp_path) == []
    assert storage.list("") == []


def test_missing_objects_raise_snapshot_missing(storage: CheckpointStorage, tmp_path: Path) -> None:
    with pytest.raises(SnapshotMissing, match=r"j/t/chk-3/_snapshot\.json"):
        storage.get_bytes("j/t/chk-3/_snapshot.json")
    local = tmp_path / "local"
    local.mkdir()
    dest = local / "dest"
    with pytest.raises(SnapshotMissing, match=r"j/t/shared/x\.sst"):
        storage.get_file("j/t/shared/x.sst", dest)
    assert list(local.iterdir()) == []  # no staged leftover either
    assert not storage.exists("j/t/shared/x.sst")


def test_put_of_a_missing_source_keeps_the_old_object(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    storage.put_bytes("j/k", b"old")
    with pytest.raises(FileNotFoundError):
        storage.put_file("j/k", tmp_path / "no-such-source")
    assert storage.get_bytes("j/k") == b"old"
    assert storage.list("") == ["j/k"]


def test_failed_put_keeps_old_object_and_leaves_no_temp_file(
    directory: DirectoryStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = directory
    storage.put_bytes("j/k", b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        storage.put_bytes("j/k", b"new")
    with pytest.raises(FileNotFoundError):
        storage.put_file("j/k", tmp_path / "no-such-source")
    monkeypatch.undo()

    assert storage.get_bytes("j/k") == b"old"
    assert _all_files(storage.root) == ["j/k"]
    assert storage.list("") == ["j/k"]


def test_list_ignores_in_flight_temp_files(directory: DirectoryStorage) -> None:
    storage = directory
    storage.put_bytes("j/k", b"x")
    (storage.root / "j" / ".tmp-0123-k2").write_bytes(b"half written")
    assert storage.list("j/") == ["j/k"]


def test_put_fsyncs_file_and_directory(
    directory: DirectoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = directory
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    storage.put_bytes("new/dir/key", b"x")
    assert "file" in synced
    # The file's rename plus each newly created directory.
    assert synced.count("dir") >= 3


def test_s3_checkpoints_without_boto3_name_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """boto3 is the extra processor[s3]: without it an s3:// location is refused in one line
    that says what to install."""
    import sys

    from processor.config import SettingsError, load_settings
    from processor.state.factory import open_storage

    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` fails as if absent
    monkeypatch.delitem(sys.modules, "processor.state.s3", raising=False)
    settings = load_settings(checkpoint_dir="s3://bucket/prefix", state_dir=tmp_path)
    with pytest.raises(SettingsError, match=r"pip install 'processor\[s3\]'") as info:
        open_storage(settings)
    assert "\n" not in str(info.value)
