"""Savepoints on a directory storage: copy, verify, redistribute state by key, delete."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from processor.state.rocksdb.snapshots import SnapshotStore
from processor.state.rocksdb.store import RocksDBStore
from processor.state.savepoints import Savepoint, SavepointError, SavepointStore, check_name
from processor.state.storage import DirectoryStorage

WORDS = [f"w{i}" for i in range(300)] + ["\0[1,2]", "ünï"]


def _job_with_two_keyed_tasks(tmp_path: Path, storage: DirectoryStorage) -> Savepoint:
    """Tasks count-0 and count-1 of job "j", each with a committed snapshot 7."""
    owners = {}
    for task, words in (("count-0", WORDS[::2]), ("count-1", WORDS[1::2])):
        db = tmp_path / task / "db"
        with RocksDBStore(db) as store:
            store.write({f"counts\0{w}".encode(): b"%d" % len(w) for w in words})
            store.write({f"other\0{w}".encode(): b"1" for w in words})
            # A process's timers (processor.engine.timers) go where its keys go.
            store.write({f"counts/timers\0{w}".encode(): b"[%d]" % len(w) for w in words})
            store.checkpoint(tmp_path / task / "chk")
        snapshots = SnapshotStore(storage, f"j/{task}", generation=3)
        owners[task] = snapshots.upload(7, tmp_path / task / "chk").ref.owner
    return Savepoint(
        name="sp",
        job="j",
        checkpoint_id=7,
        created_at="now",
        state_format="pipeline-1",
        sources={"lines": {0: 10, 1: 20}},
        tasks=owners,
        operators={"count": ["counts", "other"]},
    )


def test_save_then_load_every_key_into_the_partition_its_text_hashes_to(
    tmp_path: Path,
) -> None:
    storage = DirectoryStorage(tmp_path / "storage")
    savepoint = _job_with_two_keyed_tasks(tmp_path, storage)
    store = SavepointStore(storage)
    store.save(savepoint, storage, "j", tmp_path / "work")
    assert store.names() == ["sp"]
    saved = store.read("sp")
    assert saved.sources == {"lines": {0: 10, 1: 20}}
    assert saved.checkpoint_id == 7 and saved.stateful_operators == {"counts", "other"}

    partitions = 3
    seen: dict[str, int] = {}
    timers: dict[str, bytes] = {}
    for p in range(partitions):
        dest = tmp_path / f"new-{p}" / "db"
        dest.parent.mkdir()
        loaded = store.load_partition(saved, ["counts"], p, partitions, dest)
        with RocksDBStore(dest) as db:
            items = dict(db.items())
        assert loaded == len(items)
        for key, value in items.items():
            operator, _, text = key.partition(b"\0")
            assert zlib.crc32(text) % partitions == p
            if operator == b"counts/timers":
                timers[text.decode()] = value
                continue
            assert operator == b"counts"  # "other" was not asked for
            seen[text.decode()] = int(value)
    assert seen == {w: len(w) for w in WORDS}
    assert timers == {w: b"[%d]" % len(w) for w in WORDS}


def test_a_savepoint_outlives_the_jobs_snapshots_and_is_deleted_whole(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path / "storage")
    savepoint = _job_with_two_keyed_tasks(tmp_path, storage)
    store = SavepointStore(storage)
    store.save(savepoint, storage, "j", tmp_path / "work")
    for key in storage.list("j/"):
        storage.delete(key)  # the job's retention, or the job deleted
    dest = tmp_path / "new" / "db"
    dest.parent.mkdir()
    # Its counts and their timers.
    assert store.load_partition(store.read("sp"), ["counts"], 0, 1, dest) == 2 * len(WORDS)
    with pytest.raises(SavepointError, match="exists already"):
        store.save(savepoint, storage, "j", tmp_path / "work2")
    store.delete("sp")
    assert store.names() == [] and storage.list("savepoints/") == []
    with pytest.raises(SavepointError, match="no savepoint 'sp'"):
        store.read("sp")


def test_a_corrupt_savepoint_manifest_is_one_line(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path / "storage")
    store = SavepointStore(storage)
    store.save(_job_with_two_keyed_tasks(tmp_path, storage), storage, "j", tmp_path / "w")
    raw = storage.get_bytes("savepoints/sp/_savepoint.json")
    storage.put_bytes("savepoints/sp/_savepoint.json", raw.replace(b'"j"', b'"k"'))
    with pytest.raises(SavepointError, match=r"savepoint 'sp' is corrupt: .*checksum mismatch"):
        store.read("sp")


def test_savepoint_json_round_trips() -> None:
    savepoint = Savepoint("n", "j", 3, "t", "pipeline-1", {"a": {0: 1}}, {"s-0": "o"}, {"s": []})
    assert Savepoint.from_json(savepoint.to_json()) == savepoint
    with pytest.raises(ValueError, match="not a savepoint manifest"):
        Savepoint.from_json({"name": "n"})


@pytest.mark.parametrize(
    "name", ["a/b", "../../x", "..", ".", "", "a..b", ".hidden", "a.", "x" * 129, "sp\n", "é"]
)
def test_a_name_that_is_not_one_path_segment_is_refused_in_one_line(
    tmp_path: Path, name: str
) -> None:
    """Issue 25: `--name a/b` nested a savepoint `--list` could not see, and `--name
    ../../x` ended in a traceback."""
    store = SavepointStore(DirectoryStorage(tmp_path / "storage"))
    for call in (store.exists, store.read, store.delete):
        with pytest.raises(SavepointError, match="letters, digits") as caught:
            call(name)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["wordcount-20261202-101500", "v1.2_final", "A", "x" * 128])
def test_names_of_one_segment_are_fine(name: str) -> None:
    assert check_name(name) == name


def test_another_jobs_savepoint_is_deleted_only_when_forced(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path / "storage")
    savepoint = _job_with_two_keyed_tasks(tmp_path, storage)
    store = SavepointStore(storage)
    store.save(savepoint, storage, "j", tmp_path / "work")
    with pytest.raises(SavepointError, match="is job j's, not other's: --force"):
        store.delete("sp", job="other")
    assert store.names() == ["sp"]
    assert store.delete("sp", job="j") > 1
    store.save(savepoint, storage, "j", tmp_path / "work2")
    assert store.delete("sp", job=None) > 1  # --force
    assert store.names() == []
