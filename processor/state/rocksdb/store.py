"""A task's keyed state: one RocksDB instance holding raw bytes -> bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from rocksdict import BlockBasedOptions, Checkpoint, Options, Rdict, WriteBatch, WriteOptions


class RocksDBStore:
    """Keyed state of one task, opened at `path`.

    Writes skip the WAL: after a crash the state is rebuilt from the last
    checkpoint plus a replay of the Kafka log, so logging every write locally would
    only cost I/O. Consequently anything written since the last `checkpoint()` or
    `close()` is lost if the process dies, which is exactly what replay expects.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = Rdict(str(path), store_options())
        self._write_options = _wal_disabled()
        # Preset so every write path (put, write(batch)) skips the WAL, not just ours.
        self._db.set_write_options(self._write_options)
        self._closed = False

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values for `keys`, in order, None where absent; one RocksDB MultiGet (a Get for
        one key: a process's load, a third cheaper)."""
        if len(keys) <= 1:
            return [self._db.get(keys[0])] if keys else []
        # The stub's key type is a list of a union, which list[bytes] is not (invariance).
        lookup: list[Any] = keys
        return cast("list[bytes | None]", self._db.get(lookup))

    def write(self, items: Mapping[bytes, bytes | None]) -> None:
        """Apply all updates atomically; a None value deletes the key."""
        if not items:
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in items.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch, self._write_options)

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Every key (starting with ``prefix``) and value, in key order."""
        # raw_mode: bytes both (the stub types keys as any Rdict key).
        found = cast(
            "Iterator[tuple[bytes, bytes]]",
            self._db.items(from_key=prefix) if prefix else self._db.items(),
        )
        for key, value in found:
            if not key.startswith(prefix):
                return
            yield key, value

    def items_from(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every key from ``start`` on (and its value), in key order, to the end."""
        return cast("Iterator[tuple[bytes, bytes]]", self._db.items(from_key=start))

    def start_flush(self) -> None:
        """Begin writing the memtable to an SST file in RocksDB's own flush thread.

        rocksdict holds the GIL for the whole of a blocking call: ``create_checkpoint``
        flushing the memtable itself (tens of ms of disk I/O at high rates) would stop
        every other task thread of the worker meanwhile. Started here, the flush overlaps
        whatever the caller does next, and `checkpoint` waits for it with the GIL free.
        """
        self._db.flush(False)

    def checkpoint(self, dest: Path, flush_timeout_s: float = 30.0) -> None:
        """Create a consistent copy of the DB in `dest`, which must not exist yet.

        RocksDB flushes the memtable first (so WAL-less writes are in SST files)
        and hard-links the immutable SSTs, so this is cheap and the DB can keep
        taking writes as soon as it returns. The flush runs in RocksDB's thread while
        this one sleeps (see `start_flush`); ``create_checkpoint`` then finds little or
        nothing left to flush. Should the wait time out, it flushes the rest itself:
        slower, never less consistent.
        """
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.start_flush()
        deadline = time.monotonic() + flush_timeout_s
        while self._flushing() and time.monotonic() < deadline:
            time.sleep(0.001)
        # The Checkpoint object holds a reference to the DB; keeping it local
        # lets close() actually shut RocksDB down later.
        Checkpoint(self._db).create_checkpoint(str(dest))

    def _flushing(self) -> bool:
        """Whether a memtable is still waiting for, or in, a flush."""
        return any(
            self._int_property(name)
            for name in (
                "rocksdb.num-immutable-mem-table",
                "rocksdb.mem-table-flush-pending",
                "rocksdb.num-running-flushes",
            )
        )

    def approximate_keys(self) -> int:
        return self._int_property("rocksdb.estimate-num-keys")

    def live_size_bytes(self) -> int:
        """Bytes of SST files the current DB version uses (memtable excluded)."""
        return self._int_property("rocksdb.live-sst-files-size")

    def close(self) -> None:
        """Flush the memtable and release the DB; calling it twice is harmless."""
        if self._closed:
            return
        self._closed = True
        self._db.close()

    def __enter__(self) -> RocksDBStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _int_property(self, name: str) -> int:
        value = self._db.property_int_value(name)
        # RocksDB answers None for properties it cannot compute yet.
        return int(value) if value is not None else 0


def store_options() -> Options:
    """How a task's RocksDB is opened (and a query's view of its checkpoint). ``raw_mode``
    keeps keys and values plain bytes (no pickling, no type tags), readable by any RocksDB
    client. A Bloom filter of 10 bits a key (about 1 % false positives) in each table file:
    a state read of a key absent from a file skips it without reading its blocks, and most
    reads are of keys absent from most files (every checkpoint flushes a file of its own)."""
    options = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    options.set_block_based_table_factory(table)
    return options


def _wal_disabled() -> WriteOptions:
    options = WriteOptions()
    # rocksdict's stub (and docstring) declare disable_wal a method, but at runtime
    # it is a property and calling it raises TypeError, so set it past the stub.
    untyped: Any = options
    untyped.disable_wal = True
    return options
