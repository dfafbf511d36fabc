from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.state.rocksdb.store import RocksDBStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksDBStore]:
    db = RocksDBStore(tmp_path / "db")
    yield db
    db.close()


def _wal_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


def test_write_and_get_many(store: RocksDBStore) -> None:
    store.write({b"a": b"1", b"b": b"2", b"\x00\xff": b"\x01"})
    assert store.get_many([b"b", b"missing", b"a", b"\x00\xff"]) == [b"2", None, b"1", b"\x01"]
    assert store.get_many([b"only-missing"]) == [None]
    assert store.get_many([]) == []


def test_write_overwrites_and_none_deletes(store: RocksDBStore) -> None:
    store.write({b"a": b"1", b"b": b"2"})
    store.write({b"a": b"10", b"b": None})
    store.write({})
    assert store.get_many([b"a", b"b"]) == [b"10", None]


def test_writes_skip_the_wal(store: RocksDBStore) -> None:
    for i in range(20):
        store.write({b"k%06d" % (i * 1000 + j): b"v" * 100 for j in range(1000)})
    assert _wal_bytes(store.path) == 0


def test_checkpoint_holds_unflushed_writes_and_hard_links_ssts(
    store: RocksDBStore, tmp_path: Path
) -> None:
    store.write({b"k%05d" % i: b"v%05d" % i for i in range(5000)})
    assert store.live_size_bytes() == 0  # everything is still in the memtable

    dest = tmp_path / "checkpoints" / "chk-1"
    store.checkpoint(dest)
    store.write({b"after": b"checkpoint"})

    ssts = sorted(dest.glob("*.sst"))
    assert ssts, "checkpoint should flush the memtable into an SST"
    for sst in ssts:
        assert sst.stat().st_ino == (store.path / sst.name).stat().st_ino
    assert store.live_size_bytes() == sum(p.stat().st_size for p in ssts)

    with RocksDBStore(dest) as copy:
        assert copy.get_many([b"k00000", b"k04999", b"after"]) == [b"v00000", b"v04999", None]
        assert copy.approximate_keys() == 5000


def test_flush_started_early_is_in_the_checkpoint(store: RocksDBStore, tmp_path: Path) -> None:
    """The keyed task starts the memtable flush after its state write and takes the
    checkpoint after producing its output: nothing written before is missing."""
    store.write({b"k%05d" % i: b"v" for i in range(5000)})
    store.start_flush()
    store.start_flush()  # twice (the checkpoint starts one too): harmless
    store.checkpoint(tmp_path / "chk")
    assert not store._flushing()
    with RocksDBStore(tmp_path / "chk") as copy:
        assert copy.approximate_keys() == 5000


def test_checkpoint_without_waiting_for_the_flush_is_still_complete(
    store: RocksDBStore, tmp_path: Path
) -> None:
    """A wait that times out leaves the rest of the flush to create_checkpoint itself."""
    store.write({b"k%05d" % i: b"v%05d" % i for i in range(5000)})
    store.checkpoint(tmp_path / "chk", flush_timeout_s=0)
    with RocksDBStore(tmp_path / "chk") as copy:
        assert copy.get_many([b"k00000", b"k04999"]) == [b"v00000", b"v04999"]


def test_checkpoint_refuses_existing_directory(store: RocksDBStore, tmp_path: Path) -> None:
    store.write({b"a": b"1"})
    (tmp_path / "exists").mkdir()
    with pytest.raises(Exception, match="exists"):
        store.checkpoint(tmp_path / "exists")


def test_stats(store: RocksDBStore, tmp_path: Path) -> None:
    assert store.approximate_keys() == 0
    store.write({b"k%04d" % i: b"x" * 64 for i in range(1000)})
    assert store.approximate_keys() == 1000
    store.checkpoint(tmp_path / "chk")
    assert store.live_size_bytes() > 0


def test_close_is_idempotent_and_persists(tmp_path: Path) -> None:
    db = RocksDBStore(tmp_path / "db")
    db.write({b"a": b"1"})
    db.close()
    db.close()
    with RocksDBStore(tmp_path / "db") as reopened:
        assert reopened.get_many([b"a"]) == [b"1"]


def test_crash_keeps_checkpointed_data_only(tmp_path: Path) -> None:
    """Without a WAL, a hard crash loses what was written after the last flush."""
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from processor.state.rocksdb.store import RocksDBStore
        db = RocksDBStore(Path({str(tmp_path / "db")!r}))
        db.write({{b"before": b"1"}})
        db.checkpoint(Path({str(tmp_path / "chk")!r}))
        db.write({{b"after": b"2"}})
        os._exit(0)
        """
    )
    repo_root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, env=env)
    for path in (tmp_path / "db", tmp_path / "chk"):
        with RocksDBStore(path) as db:
            assert db.get_many([b"before", b"after"]) == [b"1", None]
