"""The door through which HTTP requests read one task's state (queryable state, issue 27).

A request thread must never read RocksDB while the task restores, replays or closes it, and a
committed read must never see state that a failure could still roll back. So each keyed task
has a `TaskGate`, shared by the task thread and the request threads:

- ``restoring`` until the task's state is its committed state (restore done, a fallback's
  replay done), ``serving`` then, ``closed`` once the task ends: requests are answered only
  while it is serving, else `NotServing` (the route answers 503 with ``Retry-After``);
- committed reads come from a *committed view*: a hard-linked copy of the RocksDB checkpoint
  taken at barrier n (`link_view`), handed over (`committed`) only once transaction n has
  committed. RocksDB itself runs ahead of it (epoch n+1's flushes, and checkpoint n's state
  before its commit), and that is what ``fresh`` reads see (`live`);
- the views are opened read-only, lazily, by the first request after a commit, so a job
  nobody queries pays only the links at each checkpoint.

Every read holds the gate's lock and is bounded by the caller (a limit on keys), so the task
thread, which takes it to hand over a view or to close, waits at most for one bounded read.
A request that cannot take it within its timeout gets `NotServing` too.

Example::

    gate = TaskGate("counts-0")
    gate.committed(4, link_view(workdir / "chk-4", workdir / "query-4"))
    read = gate.get([b"counts\\0apple"], timeout_s=2)  # Read(checkpoint=4, values=[b"3"])
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from rocksdict import AccessType, Rdict

from processor.state.rocksdb.store import RocksDBStore, store_options

GateState = Literal["restoring", "serving", "closed"]
# A key's value in the running epoch's memory: (True, value or None if deleted), or
# (False, None) when the epoch has not touched it.
EpochReader = Callable[[bytes], tuple[bool, bytes | None]]


class NotServing(Exception):
    """The task cannot answer now (restoring, moving, closed, or busy): try again later."""


@dataclass(frozen=True)
class Read:
    """What a read found: ``values`` for the keys asked (None: no value), or ``items`` of a
    scan, as of committed ``checkpoint`` (``fresh``: RocksDB's live state instead, which
    has checkpoint n's state and perhaps more)."""

    checkpoint: int
    fresh: bool
    values: list[bytes | None]
    items: list[tuple[bytes, bytes]]


def link_view(checkpoint_dir: Path, view: Path) -> Path:
    """A copy of the RocksDB checkpoint in ``checkpoint_dir`` at ``view`` that outlives it.

    The SST files are immutable: hard links, so it costs no copying and no disk. The few
    small files (manifest, options, an empty log: the store writes no WAL) are copied, so
    that nothing RocksDB might append to is shared.

    Example::

        store.checkpoint(workdir / "chk-7")
        link_view(workdir / "chk-7", workdir / "query-7")
    """
    view.mkdir()
    for entry in os.scandir(checkpoint_dir):
        target = view / entry.name
        if entry.name.endswith(".sst"):
            try:
                os.link(entry.path, target)
                continue
            except OSError:  # another file system, or no links there: copy
                pass
        shutil.copy2(entry.path, target)
    return view


class TaskGate:
    """One task's state, as requests may read it (see the module's docstring)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.state: GateState = "restoring"
        self.checkpoint = 0  # the committed checkpoint that reads answer with
        self._lock = threading.Lock()
        self._view: Path | None = None  # of checkpoint self.checkpoint
        self._opened: Rdict | None = None  # self._view, opened read-only
        self._live: RocksDBStore | None = None
        self._epoch: EpochReader | None = None

    def restoring(self) -> None:
        """The task (re)starts, restores or replays: no reads until `committed` again."""
        with self._lock:
            self.state = "restoring"
            self._live = None
            self._drop_view()

    def committed(
        self,
        checkpoint: int,
        view: Path | None,
        live: RocksDBStore,
        epoch: EpochReader | None = None,
    ) -> None:
        """Checkpoint ``checkpoint`` has committed; ``view`` holds its state (None: a task
        with no checkpoint yet, whose committed state is empty). From now on reads answer
        from it; the previous view is removed. ``live`` and ``epoch`` (what the running
        epoch holds in memory, for a key) are what ``fresh`` reads see."""
        with self._lock:
            if self.state == "closed":
                if view is not None:
                    shutil.rmtree(view, ignore_errors=True)
                return
            self._drop_view()
            self._view, self.checkpoint, self._live = view, checkpoint, live
            self._epoch = epoch
            self.state = "serving"

    def close(self) -> None:
        """The task ends (before its store closes): every later read is refused."""
        with self._lock:
            self.state = "closed"
            self._live = None
            self._drop_view()

    def get(self, keys: list[bytes], timeout_s: float, fresh: bool = False) -> Read:
        """The stored values of ``keys`` (None where there is none)."""

        def read(db: Any) -> list[bytes | None]:
            if db is None:
                return [None] * len(keys)
            if not isinstance(db, RocksDBStore):
                return cast("list[bytes | None]", db.get(list(keys)))
            stored = db.get_many(keys)
            if self._epoch is None:
                return stored
            newer = [self._epoch(key) for key in keys]
            return [v if held else s for s, (held, v) in zip(stored, newer, strict=True)]

        return self._read(timeout_s, fresh, lambda db: Read(self.checkpoint, fresh, read(db), []))

    def scan(
        self, prefix: bytes, start: bytes, limit: int, timeout_s: float, fresh: bool = False
    ) -> Read:
        """Up to ``limit`` items whose keys start with ``prefix``, from key ``start`` on."""

        def read(db: Any) -> list[tuple[bytes, bytes]]:
            if db is None:
                return []
            found: Iterator[tuple[bytes, bytes]] = (
                db.items_from(start) if isinstance(db, RocksDBStore) else db.items(from_key=start)
            )
            items: list[tuple[bytes, bytes]] = []
            for key, value in found:
                if not key.startswith(prefix) or len(items) >= limit:
                    break
                items.append((key, value))
            return items

        return self._read(timeout_s, fresh, lambda db: Read(self.checkpoint, fresh, [], read(db)))

    def _read(self, timeout_s: float, fresh: bool, read: Callable[[Any], Read]) -> Read:
        if not self._lock.acquire(timeout=timeout_s):
            raise NotServing(f"task {self.task_id} is busy")
        try:
            if self.state != "serving":
                raise NotServing(f"task {self.task_id} is {self.state}")
            if fresh:
                return read(self._live)
            if self._view is not None and self._opened is None:
                read_only = AccessType.read_only()
                self._opened = Rdict(str(self._view), store_options(), access_type=read_only)
            return read(self._opened)
        finally:
            self._lock.release()

    def _drop_view(self) -> None:
        """Close and remove the current view (the lock held)."""
        if self._opened is not None:
            self._opened.close()
            self._opened = None
        if self._view is not None:
            shutil.rmtree(self._view, ignore_errors=True)
            self._view = None
