from __future__ import annotations

import json
import re
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from processor.state.rocksdb.snapshots import (
    MANIFEST_NAME,
    SnapshotAborted,
    SnapshotCorrupt,
    SnapshotRef,
    SnapshotStore,
    generation_of,
    unseal_manifest,
)
from processor.state.rocksdb.store import RocksDBStore
from processor.state.storage import DirectoryStorage, SnapshotMissing

PREFIX = "job/task-0"
# How a ref appears in error messages: "checkpoint 3 (g0000000001-0123abcd) of job/task-0".
OWNER_RE = r"\(g\d{10}-[0-9a-f]{8}\)"


class RecordingStorage(DirectoryStorage):
    """DirectoryStorage that logs puts and can fail, or act on, the put of chosen keys."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []
        self.fail_on: str | None = None
        self.after_put: Callable[[str], None] | None = None

    def put_file(self, key: str, src: Path) -> None:
        self._record(key)
        super().put_file(key, src)
        self._done(key)

    def put_immutable_file(self, key: str, src: Path) -> None:
        self._record(key)
        super().put_immutable_file(key, src)
        self._done(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._record(key)
        super().put_bytes(key, data)
        self._done(key)

    def _record(self, key: str) -> None:
        if self.fail_on is not None and key.endswith(self.fail_on):
            raise OSError(f"injected failure writing {key}")
        self.puts.append(key)

    def _done(self, key: str) -> None:
        if self.after_put is not None:
            self.after_put(key)


@pytest.fixture
def storage(tmp_path: Path) -> RecordingStorage:
    return RecordingStorage(tmp_path / "remote")


def _rows(start: int, n: int, tag: bytes) -> dict[bytes, bytes]:
    return {b"key-%08d" % i: tag + b"-%08d" % i + b"." * 200 for i in range(start, start + n)}


def _checkpoint(store: RocksDBStore, tmp_path: Path) -> Path:
    dest = tmp_path / "local-checkpoints" / uuid.uuid4().hex
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


def _restored_rows(
    storage: DirectoryStorage, ref: SnapshotRef, tmp_path: Path
) -> dict[bytes, bytes]:
    """Restore `ref` through a store of its own (the tested stores' lineages stay as they are)."""
    dest = tmp_path / "checks" / uuid.uuid4().hex
    SnapshotStore(storage, PREFIX, 0).restore(ref, dest, reuse=False)
    return _read_all(dest)


def _manifest_key(ref: SnapshotRef) -> str:
    return f"{PREFIX}/{ref.owner}/chk-{ref.checkpoint_id:012d}/{MANIFEST_NAME}"


def _manifest(storage: DirectoryStorage, ref: SnapshotRef) -> dict[str, Any]:
    doc = unseal_manifest(storage.get_bytes(_manifest_key(ref)))
    assert isinstance(doc, dict)
    return doc


def _files(storage: DirectoryStorage, ref: SnapshotRef) -> dict[str, str]:
    files = _manifest(storage, ref)["files"]
    assert isinstance(files, dict)
    return {str(k): str(v) for k, v in files.items()}


def _sst_keys(storage: DirectoryStorage, ref: SnapshotRef) -> dict[str, str]:
    return {k: v for k, v in _files(storage, ref).items() if k.endswith(".sst")}


def _owner_keys(storage: DirectoryStorage, owner: str) -> list[str]:
    return storage.list(f"{PREFIX}/{owner}/")


def _shared_names(storage: DirectoryStorage, owner: str) -> set[str]:
    """Local names of an owner's shared files (keys are <lineage>-<name>)."""
    return {key.rsplit("-", 1)[1] for key in storage.list(f"{PREFIX}/{owner}/shared/")}


def _fake_checkpoint(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    """A checkpoint-shaped directory; lets retention tests control every file."""
    path = tmp_path / "fake" / name
    path.mkdir(parents=True)
    for file_name, data in files.items():
        (path / file_name).write_bytes(data)
    return path


def _seal(doc: dict[str, Any]) -> bytes:
    """A manifest with a valid trailer, built from the documented format."""
    data = json.dumps(doc).encode()
    return data + b"\ncrc32:%08x\n" % zlib.crc32(data)


def _rewrite(storage: DirectoryStorage, key: str, change: Callable[[bytes], bytes]) -> None:
    """Change a stored object behind the store's back, as bit rot would.

    The object is replaced, not modified in place: DirectoryStorage hard-links SSTs, and the
    inode may be shared with a live DB or another stored key.
    """
    path = storage.root / key
    data = change(path.read_bytes())
    path.unlink()
    path.write_bytes(data)


def _no_restore_leftovers(directory: Path) -> bool:
    return not directory.exists() or not [p for p in directory.iterdir() if "restoring" in p.name]


# -- upload and restore with a real RocksDB ------------------------------------------


def test_second_upload_reuses_sst_files_of_the_first(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    assert generation_of(snapshots.owner) == snapshots.generation == 1
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 3000, b"a"))
        local = _checkpoint(db, tmp_path)
        first = snapshots.upload(1, local)
        assert not local.exists()
        assert first.ref == SnapshotRef(1, snapshots.owner)
        assert first.reused_files == 0
        assert first.uploaded_bytes == first.full_bytes > 0

        db.write(_rows(3000, 3000, b"b"))
        second = snapshots.upload(2, _checkpoint(db, tmp_path), {"positions": {"0": 17}})

    ref1, ref2 = first.ref, second.ref
    assert ref2 == SnapshotRef(2, snapshots.owner)
    assert second.checkpoint_id == 2
    assert second.reused_files >= 1
    assert second.uploaded_bytes < second.full_bytes
    first_ssts, second_ssts = _sst_keys(storage, ref1), _sst_keys(storage, ref2)
    for name, key in first_ssts.items():
        assert second_ssts[name] == key
        assert storage.puts.count(key) == 1
    assert all(
        key.startswith(f"{PREFIX}/{snapshots.owner}/shared/") for key in second_ssts.values()
    )
    assert snapshots.snapshots() == [ref1, ref2]

    manifest = _manifest(storage, ref2)
    assert manifest["format"] == 2
    assert manifest["checkpoint_id"] == 2
    assert manifest["owner"] == snapshots.owner
    assert manifest["parent"] == {"checkpoint_id": 1, "owner": snapshots.owner}
    assert _manifest(storage, ref1)["parent"] is None
    assert manifest["meta"] == {"positions": {"0": 17}}
    assert manifest["full_bytes"] == second.full_bytes
    assert manifest["uploaded_bytes"] == second.uploaded_bytes
    assert isinstance(manifest["created_at"], str)
    files = _files(storage, ref2)
    assert "CURRENT" in files
    assert files["CURRENT"] == f"{PREFIX}/{snapshots.owner}/chk-000000000002/CURRENT"
    # Every file carries the size and CRC-32 restore verifies.
    for name, key in files.items():
        data = (storage.root / key).read_bytes()
        assert manifest["sizes"][name] == len(data)
        assert manifest["crc32"][name] == zlib.crc32(data)


def test_manifest_ends_with_its_crc(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1"})).ref
    raw = storage.get_bytes(_manifest_key(ref))
    body, trailer = raw.rstrip(b"\n").rsplit(b"\n", 1)
    assert trailer == b"crc32:%08x" % zlib.crc32(body)
    assert unseal_manifest(raw) == json.loads(body)
    with pytest.raises(ValueError, match="checksum"):
        unseal_manifest(body.replace(b'"checkpoint_id": 1', b'"checkpoint_id": 7') + trailer)
    with pytest.raises(ValueError):
        unseal_manifest(body)  # no trailer at all


def test_restore_gives_identical_state(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    expected = _rows(0, 2000, b"a") | _rows(1000, 2000, b"b")
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"a"))
        ref1 = snapshots.upload(1, _checkpoint(db, tmp_path)).ref
        db.write(_rows(1000, 2000, b"b"))
        ref2 = snapshots.upload(2, _checkpoint(db, tmp_path), {"positions": {"0": 5}}).ref
        db.write(_rows(0, 10, b"not-in-any-checkpoint"))

    dest = tmp_path / "restored"
    dest.mkdir()  # an empty directory is an acceptable target
    info = SnapshotStore(storage, PREFIX, 2).restore(ref2, dest)
    assert info.ref == ref2
    assert info.checkpoint_id == 2
    assert info.meta == {"positions": {"0": 5}}
    assert info.files == len(_files(storage, ref2))
    assert (info.reused_files, info.uploaded_bytes) == (0, 0)
    assert info.full_bytes == sum(p.stat().st_size for p in dest.iterdir())
    assert _read_all(dest) == expected
    SnapshotStore(storage, PREFIX, 2).restore(ref1, tmp_path / "r1")
    assert _read_all(tmp_path / "r1") == _rows(0, 2000, b"a")
    assert _no_restore_leftovers(tmp_path)


def test_restore_refuses_non_empty_target(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    local = _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"MANIFEST-1\n"})
    ref = snapshots.upload(1, local).ref
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep-me").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        snapshots.restore(ref, dest)
    assert [p.name for p in dest.iterdir()] == ["keep-me"]


def test_upload_after_restore_reuses_restored_ssts(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 3000, b"a"))
        ref1 = SnapshotStore(storage, PREFIX, 1).upload(1, _checkpoint(db, tmp_path)).ref
    restored_ssts = _sst_keys(storage, ref1)
    puts_before = len(storage.puts)

    # A new incarnation: nothing in memory, a generation of its own.
    snapshots = SnapshotStore.for_new_incarnation(storage, PREFIX, ref1)
    assert snapshots.owner != ref1.owner
    snapshots.restore(ref1, tmp_path / "restored")
    with RocksDBStore(tmp_path / "restored") as db:
        db.write(_rows(3000, 1000, b"b"))
        info = snapshots.upload(2, _checkpoint(db, tmp_path))

    assert info.reused_files == len(restored_ssts)
    assert info.uploaded_bytes < info.full_bytes
    assert _manifest(storage, info.ref)["parent"] == {"checkpoint_id": 1, "owner": ref1.owner}
    new_files = _files(storage, info.ref)
    for name, key in restored_ssts.items():
        assert new_files[name] == key  # still the predecessor's key
    for name, key in new_files.items():
        if name not in restored_ssts:
            assert key.startswith(f"{PREFIX}/{snapshots.owner}/")
    assert not set(restored_ssts.values()) & set(storage.puts[puts_before:])
    snapshots.restore(info.ref, tmp_path / "again")
    assert _read_all(tmp_path / "again") == _rows(0, 3000, b"a") | _rows(3000, 1000, b"b")


def test_restore_without_reuse_copies_every_file_again(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 3000, b"a"))
        ref1 = SnapshotStore(storage, PREFIX, 1).upload(1, _checkpoint(db, tmp_path)).ref

    snapshots = SnapshotStore.for_new_incarnation(storage, PREFIX, ref1)
    snapshots.restore(ref1, tmp_path / "restored", reuse=False)
    with RocksDBStore(tmp_path / "restored") as db:
        db.write(_rows(3000, 1000, b"b"))
        info = snapshots.upload(2, _checkpoint(db, tmp_path))

    assert info.reused_files == 0
    assert info.uploaded_bytes == info.full_bytes
    files = _files(storage, info.ref)
    assert all(key.startswith(f"{PREFIX}/{snapshots.owner}/") for key in files.values())
    assert not set(files.values()) & set(_files(storage, ref1).values())
    # Still a descendant of what it was restored from (retention follows that chain).
    assert _manifest(storage, info.ref)["parent"] == {"checkpoint_id": 1, "owner": ref1.owner}
    assert _restored_rows(storage, info.ref, tmp_path) == _rows(0, 3000, b"a") | _rows(
        3000, 1000, b"b"
    )


@pytest.mark.parametrize("same_store", [False, True], ids=["new-incarnation", "same-store"])
def test_lineages_never_share_colliding_sst_names(
    storage: RecordingStorage, tmp_path: Path, same_store: bool
) -> None:
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"base"))
        ref1 = SnapshotStore(storage, PREFIX, 1).upload(1, _checkpoint(db, tmp_path)).ref

    # Incarnation 1 restores checkpoint 1, takes checkpoint 2, then dies before
    # checkpoint 2 commits.
    first = SnapshotStore.for_new_incarnation(storage, PREFIX, ref1)
    first.restore(ref1, tmp_path / "incarnation-1")
    with RocksDBStore(tmp_path / "incarnation-1") as db:
        db.write(_rows(5000, 2000, b"one"))
        ref2 = first.upload(2, _checkpoint(db, tmp_path)).ref

    # Incarnation 2 (or the same store, falling back) restores checkpoint 1 again and
    # writes different data of the same size: RocksDB hands out the same file numbers.
    second = first if same_store else SnapshotStore.for_new_incarnation(storage, PREFIX, ref1)
    second.restore(ref1, tmp_path / "incarnation-2")
    with RocksDBStore(tmp_path / "incarnation-2") as db:
        db.write(_rows(5000, 2000, b"two"))
        ref3 = second.upload(3, _checkpoint(db, tmp_path)).ref

    base, two, three = (_sst_keys(storage, ref) for ref in (ref1, ref2, ref3))
    new_in_two = {n: k for n, k in two.items() if n not in base}
    new_in_three = {n: k for n, k in three.items() if n not in base}
    colliding = set(new_in_two) & set(new_in_three)
    assert colliding, "the scenario needs RocksDB to reuse an SST file number"
    for name in colliding:
        assert new_in_two[name] != new_in_three[name]
    for name, key in base.items():  # both lineages still share the common ancestor
        assert two[name] == key == three[name]

    assert _restored_rows(storage, ref2, tmp_path) == _rows(0, 2000, b"base") | _rows(
        5000, 2000, b"one"
    )
    assert _restored_rows(storage, ref3, tmp_path) == _rows(0, 2000, b"base") | _rows(
        5000, 2000, b"two"
    )


def test_manifest_is_written_last_and_failed_upload_is_invisible(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    files = {"000010.sst": b"s" * 100, "CURRENT": b"c", "MANIFEST-000005": b"m"}
    ref1 = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", files)).ref
    assert storage.puts[-1] == _manifest_key(ref1)

    storage.fail_on = "/MANIFEST-000005"
    local = _fake_checkpoint(tmp_path, "c2", files | {"000011.sst": b"t" * 50})
    with pytest.raises(OSError, match="injected"):
        snapshots.upload(2, local)
    assert not local.exists()
    assert snapshots.snapshots() == [ref1]
    ref2 = SnapshotRef(2, snapshots.owner)
    with pytest.raises(
        SnapshotMissing, match=rf"checkpoint 2 {OWNER_RE} of job/task-0: manifest missing"
    ):
        snapshots.restore(ref2, tmp_path / "r2")
    assert not (tmp_path / "r2").exists()


def test_upload_on_background_thread_then_retain(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    with RocksDBStore(tmp_path / "db") as db, ThreadPoolExecutor(max_workers=1) as uploader:
        futures = []
        for checkpoint_id in range(1, 6):
            db.write(_rows(checkpoint_id * 1000, 1000, b"v"))
            local = _checkpoint(db, tmp_path)
            meta = {"n": checkpoint_id}
            futures.append(uploader.submit(snapshots.upload, checkpoint_id, local, meta))
        refs = [f.result().ref for f in futures]
        assert [ref.checkpoint_id for ref in refs] == [1, 2, 3, 4, 5]
        kept = uploader.submit(snapshots.retain, refs[4], 2).result()

    assert kept == {refs[3]: {"n": 4}, refs[4]: {"n": 5}}
    assert snapshots.snapshots() == refs[3:]
    expected: dict[bytes, bytes] = {}
    for checkpoint_id in range(1, 6):
        expected |= _rows(checkpoint_id * 1000, 1000, b"v")
    assert _restored_rows(storage, refs[4], tmp_path) == expected


def test_close_makes_a_later_upload_fail_without_a_manifest(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref1 = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1"})).ref
    snapshots.close()
    local = _fake_checkpoint(tmp_path, "c2", {"000001.sst": b"s", "CURRENT": b"2"})
    puts_before = len(storage.puts)
    with pytest.raises(SnapshotAborted):
        snapshots.upload(2, local)
    assert not local.exists()
    assert storage.puts[puts_before:] == []
    assert not storage.exists(_manifest_key(SnapshotRef(2, snapshots.owner)))
    assert snapshots.snapshots() == [ref1]


def test_close_stops_an_upload_under_way_at_its_next_file(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    files = {"000001.sst": b"a", "000002.sst": b"b", "CURRENT": b"c", "OPTIONS-1": b"o"}
    local = _fake_checkpoint(tmp_path, "c1", files)
    storage.after_put = lambda key: snapshots.close()  # the task ends during the first put
    with pytest.raises(SnapshotAborted):
        snapshots.upload(1, local)
    assert not local.exists()
    assert [key.rsplit("-", 1)[1] for key in storage.puts] == ["000001.sst"]
    assert snapshots.snapshots() == []
    assert not storage.exists(_manifest_key(SnapshotRef(1, snapshots.owner)))


# -- retention ------------------------------------------------------------------------


def test_retain_keeps_what_restores_need_and_deletes_the_rest(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 2)
    own = f"{PREFIX}/{snapshots.owner}"
    sst = {name: name.encode() * 10 for name in ("a.sst", "b.sst", "c.sst", "d.sst", "e.sst")}

    def upload(checkpoint_id: int, *names: str) -> SnapshotRef:
        files = {name: sst[name] for name in names} | {"CURRENT": b"%d" % checkpoint_id}
        local = _fake_checkpoint(tmp_path, f"c{checkpoint_id}", files)
        return snapshots.upload(checkpoint_id, local, {"n": checkpoint_id}).ref

    ref1 = upload(1, "a.sst", "b.sst")
    ref2 = upload(2, "b.sst", "c.sst")
    ref3 = upload(3, "c.sst", "d.sst")
    ref4 = upload(4, "d.sst", "e.sst")  # newer than the committed one
    older = f"{PREFIX}/g0000000001-0badcafe"
    newer = f"{PREFIX}/g0000000003-0123abcd"
    survivors = [
        f"{newer}/chk-000000000007/CURRENT",  # a successor's upload under way
        f"{newer}/shared/feedbeef-000042.sst",
        f"{PREFIX}/legacy/chk-000000000001/CURRENT",  # not an owner this code wrote
        "job/task-1/g0000000001-0badcafe/chk-000000000001/CURRENT",  # another task
        "job/task-01/g0000000001-0badcafe/shared/x.sst",
    ]
    doomed = [
        f"{own}/chk-000000000005/CURRENT",  # left by a failed upload of this incarnation
        f"{own}/chk-000000000000/CURRENT",
        f"{own}/shared/0123abcd-000099.sst",
        f"{older}/chk-000000000009/{MANIFEST_NAME}",  # a predecessor's, however new its id
        f"{older}/shared/01234567-000001.sst",
    ]
    for key in survivors + doomed:
        storage.put_bytes(key, b"x")

    kept = snapshots.retain(ref3, keep=2)
    assert kept == {ref2: {"n": 2}, ref3: {"n": 3}, ref4: {"n": 4}}
    assert snapshots.snapshots() == [ref2, ref3, ref4]
    assert storage.list(f"{own}/chk-000000000001/") == []
    assert not any(storage.exists(key) for key in doomed)
    assert all(storage.exists(key) for key in survivors)
    assert _shared_names(storage, snapshots.owner) == {"b.sst", "c.sst", "d.sst", "e.sst"}
    assert storage.list(f"{older}/") == []
    for ref in (ref2, ref3, ref4):
        snapshots.restore(ref, tmp_path / f"r{ref.checkpoint_id}")
    assert ref1 not in snapshots.snapshots()

    assert snapshots.retain(ref4, keep=1) == {ref4: {"n": 4}}
    assert snapshots.snapshots() == [ref4]
    assert _shared_names(storage, snapshots.owner) == {"d.sst", "e.sst"}
    assert all(storage.exists(key) for key in survivors)

    # Later uploads keep reusing what survived (the store restored 4 last).
    info = snapshots.upload(6, _fake_checkpoint(tmp_path, "c6", {"e.sst": sst["e.sst"]}))
    assert info.reused_files == 1


def test_retain_forgets_files_it_deleted(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref1 = snapshots.upload(
        1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1", "a.sst": b"aa"})
    ).ref
    files = {"CURRENT": b"2", "a.sst": b"aa", "b.sst": b"bbb", "x.log": b"log"}
    storage.fail_on = "/x.log"  # b.sst reaches storage, checkpoint 2 never completes
    with pytest.raises(OSError, match="injected"):
        snapshots.upload(2, _fake_checkpoint(tmp_path, "c2", files))
    storage.fail_on = None
    assert _shared_names(storage, snapshots.owner) == {"a.sst", "b.sst"}

    snapshots.retain(ref1)  # the orphaned b.sst goes
    assert _shared_names(storage, snapshots.owner) == {"a.sst"}

    info = snapshots.upload(3, _fake_checkpoint(tmp_path, "c3", files))
    assert info.reused_files == 1  # a.sst only: b.sst must be copied again
    snapshots.restore(info.ref, tmp_path / "r")
    assert (tmp_path / "r" / "b.sst").read_bytes() == b"bbb"


def test_retain_refuses_an_incomplete_committed_snapshot(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref1 = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1"})).ref
    storage.put_bytes(f"{PREFIX}/{snapshots.owner}/chk-000000000002/CURRENT", b"partial")
    keys = storage.list(f"{PREFIX}/")
    with pytest.raises(
        SnapshotMissing, match=rf"checkpoint 2 {OWNER_RE} of job/task-0: manifest missing"
    ):
        snapshots.retain(SnapshotRef(2, snapshots.owner))
    # Another owner's snapshot of the same id is not the one committed.
    with pytest.raises(SnapshotMissing, match="checkpoint 1"):
        snapshots.retain(SnapshotRef(1, "g0000000000-00000000"))
    with pytest.raises(ValueError):
        snapshots.retain(ref1, keep=0)
    assert storage.list(f"{PREFIX}/") == keys
    assert snapshots.snapshots() == [ref1]


def test_retain_falls_back_to_ancestors_not_to_a_dead_lineage(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    first = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    refs = []
    for checkpoint_id in (1, 2, 3):
        files = {"CURRENT": b"%d" % checkpoint_id, f"00000{checkpoint_id}.sst": b"s"}
        local = _fake_checkpoint(tmp_path, f"c{checkpoint_id}", files)
        refs.append(first.upload(checkpoint_id, local).ref)
    _, ref2, _ = refs
    # Checkpoint 3 completed but never committed; the task restarts from 2.
    second = SnapshotStore.for_new_incarnation(storage, PREFIX, ref2)
    second.restore(ref2, tmp_path / "restored")
    files = {"CURRENT": b"5", "000002.sst": b"s", "000009.sst": b"new"}
    ref5 = second.upload(5, _fake_checkpoint(tmp_path, "c5", files)).ref
    assert _manifest(storage, ref5)["parent"] == {"checkpoint_id": 2, "owner": first.owner}

    assert second.retain(ref5, keep=2).keys() == {ref2, ref5}
    assert second.snapshots() == [ref2, ref5]
    assert _shared_names(storage, first.owner) == {"000002.sst"}
    assert _shared_names(storage, second.owner) == {"000009.sst"}
    second.restore(ref2, tmp_path / "fallback")


def test_retain_follows_parents_across_incarnations(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    first = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    ref1 = first.upload(1, _fake_checkpoint(tmp_path, "c1", {"1.sst": b"1", "CURRENT": b"1"})).ref
    second = SnapshotStore.for_new_incarnation(storage, PREFIX, ref1)
    second.restore(ref1, tmp_path / "r")
    ref2 = second.upload(2, _fake_checkpoint(tmp_path, "c2", {"2.sst": b"2", "CURRENT": b"2"})).ref
    ref3 = second.upload(3, _fake_checkpoint(tmp_path, "c3", {"3.sst": b"3", "CURRENT": b"3"})).ref

    assert second.retain(ref3, keep=3).keys() == {ref1, ref2, ref3}
    assert second.retain(ref3, keep=2).keys() == {ref2, ref3}
    assert storage.list(f"{PREFIX}/{first.owner}/") == []
    assert second.snapshots() == [ref2, ref3]


# -- missing and corrupt data ---------------------------------------------------------


def test_missing_manifest_names_the_checkpoint(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref = SnapshotRef(12, "g0000000001-0123abcd")
    with pytest.raises(
        SnapshotMissing,
        match=r"checkpoint 12 \(g0000000001-0123abcd\) of job/task-0: manifest missing",
    ) as caught:
        snapshots.restore(ref, tmp_path / "r")
    assert not isinstance(caught.value, SnapshotCorrupt)
    assert not (tmp_path / "r").exists()


def test_missing_or_truncated_file_names_checkpoint_and_file(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    files = {"000007.sst": b"x" * 1000, "CURRENT": b"MANIFEST-000001\n"}
    ref = snapshots.upload(3, _fake_checkpoint(tmp_path, "c3", files)).ref
    sst_key = _files(storage, ref)["000007.sst"]

    storage.put_bytes(sst_key, b"x" * 10)
    with pytest.raises(
        SnapshotCorrupt, match=rf"checkpoint 3 {OWNER_RE} of .*000007\.sst has 10 bytes"
    ):
        snapshots.restore(ref, tmp_path / "r")

    storage.delete(sst_key)
    with pytest.raises(
        SnapshotMissing, match=rf"checkpoint 3 {OWNER_RE} of job/task-0: file 000007\.sst missing"
    ) as caught:
        snapshots.restore(ref, tmp_path / "r")
    assert not isinstance(caught.value, SnapshotCorrupt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake", "remote"]


@pytest.mark.parametrize("sealed", [True, False], ids=["valid-crc", "no-crc"])
def test_corrupt_manifest_cannot_escape_restore_target(
    storage: RecordingStorage, tmp_path: Path, sealed: bool
) -> None:
    owner = "g0000000001-0123abcd"
    storage.put_bytes(f"{PREFIX}/{owner}/shared/x", b"evil")
    doc = {
        "format": 2,
        "checkpoint_id": 4,
        "owner": owner,
        "files": {"../evil": f"{PREFIX}/{owner}/shared/x"},
        "sizes": {"../evil": 4},
        "crc32": {"../evil": zlib.crc32(b"evil")},
        "parent": None,
        "meta": {},
    }
    raw = _seal(doc) if sealed else json.dumps(doc).encode()
    storage.put_bytes(f"{PREFIX}/{owner}/chk-000000000004/{MANIFEST_NAME}", raw)
    with pytest.raises(SnapshotCorrupt, match=rf"checkpoint 4 {OWNER_RE} .* manifest unreadable"):
        SnapshotStore(storage, PREFIX, 2).restore(SnapshotRef(4, owner), tmp_path / "r" / "db")
    assert not (tmp_path / "r" / "evil").exists()
    assert not (tmp_path / "evil").exists()
    assert not (tmp_path / "r" / "db").exists()


def test_manifest_naming_another_snapshot_is_unreadable(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref1 = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"CURRENT": b"1"})).ref
    # A manifest copied to another checkpoint's place (valid CRC) is not that checkpoint.
    stray = SnapshotRef(2, snapshots.owner)
    storage.put_bytes(_manifest_key(stray), storage.get_bytes(_manifest_key(ref1)))
    with pytest.raises(SnapshotCorrupt, match="manifest unreadable: it names another snapshot"):
        snapshots.restore(stray, tmp_path / "r")


def test_flipped_byte_in_an_sst_is_caught_and_an_older_snapshot_still_restores(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"a"))
        ref1 = snapshots.upload(1, _checkpoint(db, tmp_path)).ref
        db.write(_rows(2000, 2000, b"b"))
        ref2 = snapshots.upload(2, _checkpoint(db, tmp_path)).ref
    only_in_2 = set(_sst_keys(storage, ref2).items()) - set(_sst_keys(storage, ref1).items())
    name, key = sorted(only_in_2)[0]

    def flip(data: bytes) -> bytes:
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]

    _rewrite(storage, key, flip)
    dest = tmp_path / "work" / "db"
    with pytest.raises(
        SnapshotCorrupt,
        match=rf"checkpoint 2 {OWNER_RE} of job/task-0: file {re.escape(name)} is corrupt",
    ):
        snapshots.restore(ref2, dest)
    assert not dest.exists()
    assert list((tmp_path / "work").iterdir()) == []

    # The task falls back to an older snapshot, into the same place.
    info = snapshots.restore(ref1, dest, reuse=False)
    assert info.ref == ref1
    assert _read_all(dest) == _rows(0, 2000, b"a")


def test_flipped_digit_in_a_manifest_is_caught_by_its_trailer(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    with RocksDBStore(tmp_path / "db") as db:
        db.write(_rows(0, 2000, b"a"))
        ref1 = snapshots.upload(1, _checkpoint(db, tmp_path), {"positions": {"0": 1000}}).ref
        db.write(_rows(2000, 2000, b"b"))
        ref2 = snapshots.upload(2, _checkpoint(db, tmp_path), {"positions": {"0": 1234567}}).ref

    # The offset still parses after the flip: only the trailer can tell.
    _rewrite(storage, _manifest_key(ref2), lambda raw: raw.replace(b"1234567", b"1234667", 1))
    dest = tmp_path / "work" / "db"
    with pytest.raises(
        SnapshotCorrupt, match=rf"checkpoint 2 {OWNER_RE} of job/task-0: manifest unreadable"
    ):
        snapshots.restore(ref2, dest)
    assert not dest.exists()
    assert _no_restore_leftovers(tmp_path / "work")
    # Retention refuses to work from a manifest it cannot trust, and deletes nothing.
    keys = storage.list(f"{PREFIX}/")
    with pytest.raises(SnapshotCorrupt):
        snapshots.retain(ref2)
    assert storage.list(f"{PREFIX}/") == keys

    info = snapshots.restore(ref1, dest, reuse=False)
    assert info.meta == {"positions": {"0": 1000}}
    assert _read_all(dest) == _rows(0, 2000, b"a")


def test_a_foreign_db_starts_a_new_lineage(storage: RecordingStorage, tmp_path: Path) -> None:
    snapshots = SnapshotStore(storage, PREFIX, 1)
    ref1 = snapshots.upload(
        1, _fake_checkpoint(tmp_path, "c1", {"000005.sst": b"old", "CURRENT": b"1"})
    ).ref
    # Not restored through this store, yet the same SST name with other content.
    info = snapshots.upload(
        2, _fake_checkpoint(tmp_path, "c2", {"000005.sst": b"other", "CURRENT": b"2"})
    )
    assert info.reused_files == 0
    assert _sst_keys(storage, ref1)["000005.sst"] != _sst_keys(storage, info.ref)["000005.sst"]
    assert _manifest(storage, info.ref)["parent"] is None
    snapshots.restore(ref1, tmp_path / "r1")
    assert (tmp_path / "r1" / "000005.sst").read_bytes() == b"old"


# -- generations and fencing ----------------------------------------------------------


def test_new_incarnation_on_empty_storage_is_generation_one(storage: RecordingStorage) -> None:
    snapshots = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    assert snapshots.generation == 1
    assert re.fullmatch(r"g0000000001-[0-9a-f]{8}", snapshots.owner)
    assert snapshots.prefix == PREFIX
    other = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    assert other.owner != snapshots.owner  # same generation, still never the same keys


def test_new_incarnation_is_above_every_owner_in_storage(storage: RecordingStorage) -> None:
    storage.put_bytes(f"{PREFIX}/g0000000003-0123abcd/shared/0a0b0c0d-000001.sst", b"x")
    storage.put_bytes(f"{PREFIX}/g0000000007-0123abcd/chk-000000000002/CURRENT", b"x")
    storage.put_bytes(f"{PREFIX}/g0000000005-89abcdef/chk-000000000009/{MANIFEST_NAME}", b"x")
    # Neighbours that are not this task's.
    storage.put_bytes("job/task-1/g0000000099-0123abcd/chk-000000000001/CURRENT", b"x")
    storage.put_bytes("job/task-01/g0000000050-0123abcd/chk-000000000001/CURRENT", b"x")
    assert SnapshotStore.for_new_incarnation(storage, PREFIX, None).generation == 8
    committed = SnapshotRef(9, "g0000000005-89abcdef")
    assert SnapshotStore.for_new_incarnation(storage, PREFIX, committed).generation == 8
    committed = SnapshotRef(9, "g0000000011-89abcdef")
    assert SnapshotStore.for_new_incarnation(storage, PREFIX, committed).generation == 12


def test_new_incarnation_is_above_the_committed_owner_even_on_empty_storage(
    storage: RecordingStorage,
) -> None:
    # The committed snapshot's files may be gone (or in another storage): the commit still
    # proves an incarnation of that generation existed.
    committed = SnapshotRef(4, "g0000000012-abcdef01")
    snapshots = SnapshotStore.for_new_incarnation(storage, PREFIX, committed)
    assert snapshots.generation == 13
    assert (
        SnapshotStore.for_new_incarnation(storage, PREFIX, SnapshotRef(4, "legacy")).generation == 1
    )


def test_owners_that_do_not_parse_are_ignored_and_never_deleted(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    foreign = [
        f"{PREFIX}/legacy/chk-000000000001/CURRENT",
        f"{PREFIX}/shared/0123456789ab-000099.sst",  # the layout before owners
        f"{PREFIX}/chk-000000000003/{MANIFEST_NAME}",
        f"{PREFIX}/g99-deadbeef/chk-000000000001/CURRENT",
        f"{PREFIX}/g0000000099-DEADBEEF/chk-000000000001/CURRENT",
        f"{PREFIX}/g00000000099-deadbeef/chk-000000000001/CURRENT",
        f"{PREFIX}/g0000000099-deadbeef0/chk-000000000001/CURRENT",
        f"{PREFIX}/x-g0000000099-deadbeef/chk-000000000001/CURRENT",
    ]
    for key in foreign:
        storage.put_bytes(key, b"not ours")
    for owner in ("legacy", "shared", "g99-deadbeef", "g0000000099-DEADBEEF"):
        assert generation_of(owner) is None

    snapshots = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    assert snapshots.generation == 1
    ref1 = snapshots.upload(1, _fake_checkpoint(tmp_path, "c1", {"a.sst": b"a", "CURRENT": b"1"}))
    ref2 = snapshots.upload(2, _fake_checkpoint(tmp_path, "c2", {"b.sst": b"b", "CURRENT": b"2"}))
    assert snapshots.snapshots() == [ref1.ref, ref2.ref]  # no old-layout manifest listed
    snapshots.retain(ref2.ref, keep=1)
    assert all(storage.exists(key) for key in foreign)
    assert _owner_keys(storage, snapshots.owner) == sorted(
        [_manifest_key(ref2.ref), *_files(storage, ref2.ref).values()]
    )


def test_new_incarnation_accepts_the_prefixes_the_constructor_accepts(
    storage: RecordingStorage,
) -> None:
    storage.put_bytes(f"{PREFIX}/g0000000003-0123abcd/chk-000000000001/CURRENT", b"x")
    assert SnapshotStore(storage, PREFIX + "/", 1).prefix == PREFIX
    assert SnapshotStore.for_new_incarnation(storage, PREFIX + "/", None).generation == 4


def test_interleaved_incarnations_never_break_the_committed_snapshot(
    storage: RecordingStorage, tmp_path: Path
) -> None:
    """A zombie keeps uploading and retaining while its successor takes over."""
    expected: dict[SnapshotRef, dict[bytes, bytes]] = {}

    def check(committed: SnapshotRef) -> None:
        # Whatever just happened, the committed snapshot restores to exactly its state.
        assert committed in a.snapshots()
        assert _restored_rows(storage, committed, tmp_path) == expected[committed]

    def upload(
        store: SnapshotStore, db: RocksDBStore, checkpoint_id: int, state: dict[bytes, bytes]
    ) -> SnapshotRef:
        ref = store.upload(checkpoint_id, _checkpoint(db, tmp_path), {"by": store.owner}).ref
        expected[ref] = dict(state)
        return ref

    a = SnapshotStore.for_new_incarnation(storage, PREFIX, None)
    assert a.generation == 1
    a_db = RocksDBStore(tmp_path / "a-db")
    b_db: RocksDBStore | None = None
    try:
        a_state = _rows(0, 2000, b"a1")
        a_db.write(a_state)
        ref_a1 = upload(a, a_db, 1, a_state)
        check(ref_a1)
        a_db.write(_rows(1000, 2000, b"a2"))
        a_state |= _rows(1000, 2000, b"a2")
        ref_a2 = upload(a, a_db, 2, a_state)
        check(ref_a2)  # A committed 2
        a2_keys = set(_files(storage, ref_a2).values())

        # B takes over: init_transactions fenced A, so B reads A's commit of 2.
        b = SnapshotStore.for_new_incarnation(storage, PREFIX, ref_a2)
        assert b.generation > a.generation
        assert generation_of(b.owner) == b.generation
        check(ref_a2)
        b.restore(ref_a2, tmp_path / "b-db")
        b_db = RocksDBStore(tmp_path / "b-db")
        b_db.write(_rows(2500, 1500, b"b3"))
        ref_b3 = upload(b, b_db, 3, a_state | _rows(2500, 1500, b"b3"))
        check(ref_b3)  # B committed 3
        b3_keys = set(_files(storage, ref_b3).values())
        a_keys_in_b3 = {k for k in b3_keys if k.startswith(f"{PREFIX}/{a.owner}/")}
        assert a_keys_in_b3, "B should reuse the SSTs it restored from A's snapshot 2"
        assert a_keys_in_b3 <= a2_keys
        assert all(k.endswith(".sst") for k in a_keys_in_b3)

        # A, a zombie, uploads its own 3; the upload fails midway.
        a_db.write(_rows(2500, 1500, b"zombie"))
        puts_before = len(storage.puts)
        storage.fail_on = f"{a.owner}/chk-000000000003/CURRENT"
        with pytest.raises(OSError, match="injected"):
            upload(a, a_db, 3, a_state | _rows(2500, 1500, b"zombie"))
        storage.fail_on = None
        zombie_keys = set(storage.puts[puts_before:])
        assert zombie_keys, "the zombie's upload should have stored files before failing"
        assert all(k.startswith(f"{PREFIX}/{a.owner}/") for k in zombie_keys)
        assert any(k.startswith(f"{PREFIX}/{a.owner}/shared/") for k in zombie_keys)
        assert SnapshotRef(3, a.owner) not in a.snapshots()
        check(ref_b3)

        # A's late retention, for the commit of 2 it made before it was fenced.
        b_owned = _owner_keys(storage, b.owner)
        assert a.retain(ref_a2, keep=2) == {ref_a1: {"by": a.owner}, ref_a2: {"by": a.owner}}
        assert _owner_keys(storage, b.owner) == b_owned
        assert not any(storage.exists(k) for k in zombie_keys)
        check(ref_b3)
        check(ref_a2)

        # B's retention reaches into A's files, the older generation's, keeping what it needs.
        assert b.retain(ref_b3, keep=2).keys() == {ref_a2, ref_b3}
        assert a.snapshots() == [ref_a2, ref_b3]
        assert set(_owner_keys(storage, a.owner)) == a2_keys | {_manifest_key(ref_a2)}
        check(ref_b3)
        assert b.retain(ref_b3, keep=1) == {ref_b3: {"by": b.owner}}
        assert set(_owner_keys(storage, a.owner)) == a_keys_in_b3
        assert set(_owner_keys(storage, b.owner)) == (b3_keys - a_keys_in_b3) | {
            _manifest_key(ref_b3)
        }
        check(ref_b3)

        # A retains late once more: its commit is gone, so it deletes nothing.
        everything = storage.list(f"{PREFIX}/")
        with pytest.raises(SnapshotMissing, match="manifest missing, nothing deleted"):
            a.retain(ref_a2, keep=2)
        assert storage.list(f"{PREFIX}/") == everything
        check(ref_b3)

        # B goes on reusing A's files that survived: each of B's files that was A's is still
        # A's key, none uploaded again. (Which survive is RocksDB's: a background compaction
        # may merge them into a file of B's, more likely on a loaded machine.)
        from_a = {name for name, key in _files(storage, ref_b3).items() if key in a_keys_in_b3}
        b_db.write(_rows(4000, 100, b"b4"))
        b4_state = a_state | _rows(2500, 1500, b"b3") | _rows(4000, 100, b"b4")
        ref_b4 = upload(b, b_db, 4, b4_state)
        files4 = _files(storage, ref_b4)
        assert all(files4[name] in a_keys_in_b3 for name in from_a & files4.keys())
        check(ref_b4)
    finally:
        a_db.close()
        if b_db is not None:
            b_db.close()
