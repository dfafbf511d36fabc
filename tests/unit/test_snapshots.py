from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from processor.state.rocksdb.snapshots import MANIFEST_NAME, SnapshotStore
from processor.state.rocksdb.store import RocksDBStore
from processor.state.storage import DirectoryStorage, SnapshotMissing

PREFIX = "job/task-0"


class RecordingStorage(DirectoryStorage):
    """DirectoryStorage that logs puts and can fail the put of one chosen key."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []
        self.fail_on: str | None = None

    def put_file(self, key: str, src: Path) -> None:
        self._record(key)
        super().put_file(key, src)

    def put_immutable_file(self, key: str, src: Path) -> None:
        self._record(key)
        super().put_immutable_file(key, src)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._record(key)
        super().put_bytes(key, data)

    def _record(self, key: str) -> None:
        if self.fail_on is not None and key.endswith(self.fail_on):
            raise OSError(f"injected failure writing {key}")
        self.puts.append(key)


@pytest.fixture
def storage(tmp_path: Path) -> RecordingStorage:
    return RecordingStorage(tmp_path / "remote")


def _rows(start: int, n: int, tag: bytes) -> dict[bytes, bytes]:
    return {b"key-%08d" % i: tag + b"-%08d" % i + b"." * 200 for i in range(start, start + n)}


def _checkpoint(store: RocksDBStore, tmp_path: Path) -> Path:
    dest = tmp_path / "local-checkpoints" / f"c{len(list(tmp_path.glob('local-checkpoints/*')))}"
    store.checkpoint(dest)
    return dest


def _read_all(path: Path) -> dict[bytes, bytes]:
    db = Rdict(str(path), Options(raw_mode=True))
    try:
        rows: dict[bytes, bytes] = {}
        for key, value in db.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)
            rows[key] = value
        return rows
    finally:
        db.close()


def _manifest(storage: DirectoryStorage, checkpoint_id: int) -> dict[str, object]:
    raw = storage.get_bytes(f"{PREFIX}/chk-{checkpoint_id:012d}/{MANIFEST_NAME}")
    doc: dict[str, object] = json.loads(raw)
    return doc


def _files(storage: DirectoryStorage, checkpoint_id: int) -> dict[str, str]:
    files = _manifest(storage, checkpoint_id)["files"]
    assert isinstance(files, dict)
    return {str(k): str(v) for k, v in files.items()}


def _sst_keys(storage: DirectoryStorage, checkpoint_id: int) -> dict[str, str]:
    return {k: v for k, v in _files(storage, checkpoint_id).items() if k.endswith(".sst")}


def _fake_checkpoint(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    """A checkpoint-shaped directory; lets retention tests control every file."""
    path = tmp_path / "fake" / name
    path.mkdir(parents=True)
    for file_name, data in files.items():
        (path / file_name).write_bytes(data)
    return path


# -- upload and restore with a real RocksDB ------------------------------------------


def test_second_upload_reuses_sst_files_of_the_first(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 3000, b"a"))
        local = _checkpoint(db, tmp_path)
        first = snapshots.upload(1, local)
        assert not local.exists()
        assert first.reused_files == 0
        assert first.uploaded_bytes == first.full_bytes > 0

        db.write(_rows(3000, 3000, b"b"))
        second = snapshots.upload(2, _checkpoint(db, tmp_path))

    assert second.reused_files >= 1
    assert second.uploaded_bytes < second.full_bytes
    first_ssts, second_ssts = _sst_keys(storage, 1), _sst_keys(storage, 2)
    for name, key in first_ssts.items():
        assert second_ssts[name] == key
        assert storage.puts.count(key) == 1
    assert all(key.startswith(f"{PREFIX}/shared/") for key in second_ssts.values())
    assert snapshots.checkpoints() == [1, 2]

    manifest = _manifest(storage, 2)
    assert manifest["checkpoint_id"] == 2
    assert manifest["full_bytes"] == second.full_bytes
    assert manifest["uploaded_bytes"] == second.uploaded_bytes
    assert isinstance(manifest["created_at"], str)
    assert "CURRENT" in _files(storage, 2)


def test_restore_gives_identical_state(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    expected = _rows(0, 2000, b"a") | _rows(1000, 2000, b"b")
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"a"))
        snapshots.upload(1, _checkpoint(db, tmp_path))
        db.write(_rows(1000, 2000, b"b"))
        snapshots.upload(2, _checkpoint(db, tmp_path))
        db.write(_rows(0, 10, b"not-in-any-checkpoint"))

    dest = tmp_path / "restored"
    dest.mkdir()  # an empty directory is an acceptable target
    info = SnapshotStore(storage, PREFIX).restore(2, dest)
    assert info.checkpoint_id == 2
    assert info.files == len(_files(storage, 2))
    assert info.full_bytes == sum(p.stat().st_size for p in dest.iterdir())
    assert _read_all(dest) == expected
    SnapshotStore(storage, PREFIX).restore(1, tmp_path / "r1")
    assert _read_all(tmp_path / "r1") == _rows(0, 2000, b"a")
    assert sorted(p.name for p in tmp_path.iterdir() if "restoring" in p.name) == []


def test_restore_refuses_non_empty_target(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    local = _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"MANIFEST-1\n"})
    snapshots.upload(1, local)
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep-me").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        snapshots.restore(1, dest)
    assert [p.name for p in dest.iterdir()] == ["keep-me"]


def test_upload_after_restore_reuses_restored_ssts(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 3000, b"a"))
        SnapshotStore(storage, PREFIX).upload(1, _checkpoint(db, tmp_path))
    restored_ssts = _sst_keys(storage, 1)
    puts_before = len(storage.puts)

    snapshots = SnapshotStore(storage, PREFIX)  # a new process: nothing in memory
    snapshots.restore(1, tmp_path / "restored")
    with RocksDBStore(tmp_path / "restored") as db:
        db.write(_rows(3000, 1000, b"b"))
        info = snapshots.upload(2, _checkpoint(db, tmp_path))

    assert info.reused_files == len(restored_ssts)
    assert info.uploaded_bytes < info.full_bytes
    new_ssts = _sst_keys(storage, 2)
    for name, key in restored_ssts.items():
        assert new_ssts[name] == key
    assert not set(restored_ssts.values()) & set(storage.puts[puts_before:])
    snapshots.restore(2, tmp_path / "again")
    assert _read_all(tmp_path / "again") == _rows(0, 3000, b"a") | _rows(3000, 1000, b"b")


@pytest.mark.parametrize("same_store", [False, True], ids=["new-process", "same-store"])
def test_crashed_lineages_never_share_colliding_sst_names(
    storage: RecordingStorage, tmp_path: Path, same_store: bool
) -> None:
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"base"))
        SnapshotStore(storage, PREFIX).upload(1, _checkpoint(db, tmp_path))

    # Incarnation 1 restores checkpoint 1, takes checkpoint 2, then dies before
    # checkpoint 2 commits.
    first = SnapshotStore(storage, PREFIX)
    first.restore(1, tmp_path / "incarnation-1")
    with RocksDBStore(tmp_path / "incarnation-1") as db:
        db.write(_rows(5000, 2000, b"one"))
        first.upload(2, _checkpoint(db, tmp_path))

    # Incarnation 2 restores checkpoint 1 again and writes different data of the
    # same size: RocksDB hands out the same file numbers a second time.
    second = first if same_store else SnapshotStore(storage, PREFIX)
    second.restore(1, tmp_path / "incarnation-2")
    with RocksDBStore(tmp_path / "incarnation-2") as db:
        db.write(_rows(5000, 2000, b"two"))
        second.upload(3, _checkpoint(db, tmp_path))

    base, two, three = _sst_keys(storage, 1), _sst_keys(storage, 2), _sst_keys(storage, 3)
    new_in_two = {n: k for n, k in two.items() if n not in base}
    new_in_three = {n: k for n, k in three.items() if n not in base}
    colliding = set(new_in_two) & set(new_in_three)
    assert colliding, "the scenario needs RocksDB to reuse an SST file number"
    for name in colliding:
        assert new_in_two[name] != new_in_three[name]
    for name, key in base.items():  # both lineages still share the common ancestor
        assert two[name] == key == three[name]

    restorer = SnapshotStore(storage, PREFIX)
    restorer.restore(2, tmp_path / "check-2")
    restorer.restore(3, tmp_path / "check-3")
    assert _read_all(tmp_path / "check-2") == _rows(0, 2000, b"base") | _rows(5000, 2000, b"one")
    assert _read_all(tmp_path / "check-3") == _rows(0, 2000, b"base") | _rows(5000, 2000, b"two")


def test_reuploading_an_id_replaces_a_crashed_attempt(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    snapshots.upload(5, _fake_checkpoint(tmp_path, "a", {"MANIFEST-7": b"old", "x.sst": b"1"}))
    snapshots = SnapshotStore(storage, PREFIX)
    snapshots.upload(5, _fake_checkpoint(tmp_path, "b", {"MANIFEST-9": b"new", "x.sst": b"2"}))

    assert storage.list(f"{PREFIX}/chk-000000000005/") == [
        f"{PREFIX}/chk-000000000005/MANIFEST-9",
        f"{PREFIX}/chk-000000000005/{MANIFEST_NAME}",
    ]
    snapshots.restore(5, tmp_path / "r")
    assert (tmp_path / "r" / "x.sst").read_bytes() == b"2"


def test_manifest_is_written_last_and_failed_upload_is_invisible(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    files = {"000010.sst": b"s" * 100, "CURRENT": b"c", "MANIFEST-000005": b"m"}
    snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", files))
    assert storage.puts[-1] == f"{PREFIX}/chk-000000000001/{MANIFEST_NAME}"

    storage.fail_on = "/MANIFEST-000005"
    local = _fake_checkpoint(tmp_path, "c2", files | {"000011.sst": b"t" * 50})
    with pytest.raises(OSError, match="injected"):
        snapshots.upload(2, local)
    assert not local.exists()
    assert snapshots.checkpoints() == [1]
    with pytest.raises(SnapshotMissing, match="checkpoint 2 of job/task-0: manifest missing"):
        snapshots.restore(2, tmp_path / "r2")


def test_upload_on_background_thread_then_retain(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    with RocksDBStore(tmp_path / "db") as db, ThreadPoolExecutor(max_workers=1) as uploader:
        futures = []
        for checkpoint_id in range(1, 6):
            db.write(_rows(checkpoint_id * 1000, 1000, b"v"))
            local = _checkpoint(db, tmp_path)
            futures.append(uploader.submit(snapshots.upload, checkpoint_id, local))
        assert [f.result().checkpoint_id for f in futures] == [1, 2, 3, 4, 5]
        uploader.submit(snapshots.retain, 5, 2).result()

    assert snapshots.checkpoints() == [4, 5]
    restored = tmp_path / "r"
    snapshots.restore(5, restored)
    expected: dict[bytes, bytes] = {}
    for checkpoint_id in range(1, 6):
        expected |= _rows(checkpoint_id * 1000, 1000, b"v")
    assert _read_all(restored) == expected


# -- retention ------------------------------------------------------------------------


def test_retain_keeps_what_restores_need_and_deletes_the_rest(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    sst = {name: name.encode() * 10 for name in ("a.sst", "b.sst", "c.sst", "d.sst", "e.sst")}

    def upload(checkpoint_id: int, *names: str) -> None:
        files = {name: sst[name] for name in names} | {"CURRENT": b"%d" % checkpoint_id}
        snapshots.upload(checkpoint_id, _fake_checkpoint(tmp_path, f"c{checkpoint_id}", files))

    upload(1, "a.sst", "b.sst")
    upload(2, "b.sst", "c.sst")
    upload(3, "c.sst", "d.sst")
    upload(4, "d.sst", "e.sst")  # newer than the committed one
    storage.put_bytes(f"{PREFIX}/chk-000000000005/CURRENT", b"in progress")
    storage.put_bytes(f"{PREFIX}/chk-000000000000/CURRENT", b"abandoned")
    storage.put_bytes(f"{PREFIX}/shared/0123456789ab-000099.sst", b"crashed session")
    storage.put_bytes("job/task-1/chk-000000000001/CURRENT", b"another task")
    storage.put_bytes("job/task-1/shared/x.sst", b"another task")

    def shared_names() -> set[str]:
        return {key.rsplit("-", 1)[1] for key in storage.list(f"{PREFIX}/shared/")}

    snapshots.retain(3, keep=2)
    assert snapshots.checkpoints() == [2, 3, 4]
    assert storage.list(f"{PREFIX}/chk-000000000001/") == []
    assert storage.list(f"{PREFIX}/chk-000000000000/") == []
    assert storage.exists(f"{PREFIX}/chk-000000000005/CURRENT")
    assert shared_names() == {"b.sst", "c.sst", "d.sst", "e.sst"}
    assert storage.list("job/task-1/") == [
        "job/task-1/chk-000000000001/CURRENT",
        "job/task-1/shared/x.sst",
    ]
    for checkpoint_id in (2, 3, 4):
        snapshots.restore(checkpoint_id, tmp_path / f"r{checkpoint_id}")

    snapshots.retain(4, keep=1)
    assert snapshots.checkpoints() == [4]
    assert shared_names() == {"d.sst", "e.sst"}
    assert storage.exists(f"{PREFIX}/chk-000000000005/CURRENT")

    # Later uploads keep reusing what survived.
    info = snapshots.upload(6, _fake_checkpoint(tmp_path, "c6", {"e.sst": sst["e.sst"]}))
    assert info.reused_files == 1


def test_retain_forgets_files_it_deleted(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1", "a.sst": b"aa"}))
    files = {"CURRENT": b"2", "a.sst": b"aa", "b.sst": b"bbb"}
    storage.fail_on = "/CURRENT"  # b.sst reaches storage, checkpoint 2 never completes
    with pytest.raises(OSError, match="injected"):
        snapshots.upload(2, _fake_checkpoint(tmp_path, "c2", files))
    storage.fail_on = None

    snapshots.retain(1)  # the orphaned b.sst goes
    assert [k.rsplit("-", 1)[1] for k in storage.list(f"{PREFIX}/shared/")] == ["a.sst"]

    info = snapshots.upload(2, _fake_checkpoint(tmp_path, "c2-retry", files))
    assert info.reused_files == 1  # a.sst only: b.sst must be copied again
    snapshots.restore(2, tmp_path / "r")
    assert (tmp_path / "r" / "b.sst").read_bytes() == b"bbb"


def test_retain_refuses_an_incomplete_committed_checkpoint(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1"}))
    with pytest.raises(SnapshotMissing, match="checkpoint 2 of job/task-0"):
        snapshots.retain(2)
    with pytest.raises(ValueError):
        snapshots.retain(1, keep=0)
    assert snapshots.checkpoints() == [1]


# -- missing data ---------------------------------------------------------------------


def test_missing_manifest_names_the_checkpoint(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    with pytest.raises(SnapshotMissing, match="checkpoint 12 of job/task-0: manifest missing"):
        snapshots.restore(12, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_missing_or_truncated_file_names_checkpoint_and_file(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    files = {"000007.sst": b"x" * 1000, "CURRENT": b"MANIFEST-000001\n"}
    snapshots.upload(3, _fake_checkpoint(tmp_path, "c3", files))
    sst_key = _files(storage, 3)["000007.sst"]

    storage.put_bytes(sst_key, b"x" * 10)
    with pytest.raises(SnapshotMissing, match=r"checkpoint 3 of .*000007\.sst has 10 bytes"):
        snapshots.restore(3, tmp_path / "r")

    storage.delete(sst_key)
    with pytest.raises(SnapshotMissing, match=r"checkpoint 3 of job/task-0: file 000007\.sst"):
        snapshots.restore(3, tmp_path / "r")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake", "remote"]


def test_corrupt_manifest_cannot_escape_restore_target(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    doc = {"checkpoint_id": 4, "files": {"../evil": f"{PREFIX}/shared/x"}}
    storage.put_bytes(f"{PREFIX}/chk-000000000004/{MANIFEST_NAME}", json.dumps(doc).encode())
    with pytest.raises(SnapshotMissing, match=r"checkpoint 4 .* manifest unreadable"):
        SnapshotStore(storage, PREFIX).restore(4, tmp_path / "r")


def test_retain_falls_back_to_ancestors_not_to_a_dead_lineage(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    first = SnapshotStore(storage, PREFIX)
    for checkpoint_id in (1, 2, 3):
        files = {"CURRENT": b"%d" % checkpoint_id, f"00000{checkpoint_id}.sst": b"s"}
        first.upload(checkpoint_id, _fake_checkpoint(tmp_path, f"c{checkpoint_id}", files))
    # Checkpoint 3 completed but never committed; the task restarts from 2.
    second = SnapshotStore(storage, PREFIX)
    second.restore(2, tmp_path / "restored")
    files = {"CURRENT": b"5", "000002.sst": b"s", "000009.sst": b"new"}
    second.upload(5, _fake_checkpoint(tmp_path, "c5", files))
    assert _manifest(storage, 5)["parent"] == 2

    second.retain(5, keep=2)
    assert second.checkpoints() == [2, 5]
    assert sorted(k.rsplit("-", 1)[1] for k in storage.list(f"{PREFIX}/shared/")) == [
        "000002.sst",
        "000009.sst",
    ]
    second.restore(2, tmp_path / "fallback")


def test_a_foreign_db_starts_a_new_lineage(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX)
    snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"000005.sst": b"old", "CURRENT": b"1"}))
    # Not restored through this store, yet the same SST name with other content.
    info = snapshots.upload(
        2, _fake_checkpoint(tmp_path, "c2", {"000005.sst": b"other", "CURRENT": b"2"})
    )
    assert info.reused_files == 0
    assert _sst_keys(storage, 1)["000005.sst"] != _sst_keys(storage, 2)["000005.sst"]
    assert _manifest(storage, 2)["parent"] is None
    snapshots.restore(1, tmp_path / "r1")
    assert (tmp_path / "r1" / "000005.sst").read_bytes() == b"old"
