"""A keyed task's `SnapshotStore`, run in a process of its own.

Every system call of an upload or a retention (stat, the reads for the CRC-32, link, fsync,
rename, unlink; for S3 every socket operation) releases the GIL, and taking it back waits up
to the switch interval (5 ms) behind a task thread that is busy. In the worker, an upload of a
RocksDB checkpoint, 6 ms alone, took 417 ms beside one busy thread, and 6.5 ms from this
process (`python bench/experiments/snapshot_gil.py`): here it has a GIL of its own, and the
task pays one message out and one back.

The child holds the task's only SnapshotStore, so the store's state (its lineage, the files it
may reuse, the parent snapshot) lives where the uploads run. It serves one call at a time in
the order they were sent, as the single upload thread did before.

Fencing stays the store's (owners and generations, see snapshots.py): a late upload or
retention of an older incarnation is inert, whichever process runs it. The child still stops
early: its lifeline is a pipe only the task's process writes to, and end of file on it
(`close()`, or that process's death) closes the store, which stops a call under way at its
next file and refuses the rest. A fault point reached here (``snapshot_uploading``,
``restoring``) kills the worker as well (`processor.faults.serve`); its ``#n`` counts this
task's arrivals.

    python -m processor.state.rocksdb.snapshot_process <socket fd> <lifeline fd>

is how the task starts it; what it needs of the settings (logging, the storage's
`StorageSpec`: no pydantic to import) comes as the first message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from processor import faults
from processor.logs import configure_logging
from processor.state.factory import StorageSpec, open_storage
from processor.state.rocksdb.snapshots import (
    SnapshotAborted,
    SnapshotInfo,
    SnapshotRef,
    SnapshotStore,
)

if TYPE_CHECKING:
    from processor.config import Settings

log = logging.getLogger(__name__)

# How long close() lets a call under way reach its next file before the child is killed.
STOP_TIMEOUT_S = 10.0
_STORE_CALLS = frozenset({"restore", "snapshots", "upload", "retain"})
_MODULE = "processor.state.rocksdb.snapshot_process"  # also when this file runs as __main__
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class SnapshotProcessDied(Exception):
    """The snapshot process ended without being asked to."""


class SnapshotProcess:
    """The SnapshotStore of task ``name``, under ``prefix`` of the settings' storage.

    Start it early: the child's start-up (0.07 s of imports, no pydantic) overlaps whatever
    the task does before `open`. Every call returns a Future or waits for one; a call the
    store raises for raises the same exception here (or a RuntimeError naming it, should it
    not survive pickling).
    """

    def __init__(self, settings: Settings, prefix: str, name: str) -> None:
        self.name = name
        ours, theirs = socket.socketpair()
        lifeline_read, self._lifeline = os.pipe()
        # The child imports this very package, whatever the working directory holds.
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", _MODULE, str(theirs.fileno()), str(lifeline_read)],
                pass_fds=(theirs.fileno(), lifeline_read),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            ours.close()
            os.close(self._lifeline)
            raise
        finally:
            theirs.close()
            os.close(lifeline_read)
        self._conn = Connection(ours.detach())
        self._lock = threading.Lock()  # the pending calls, the sending side, closing
        self._pending: dict[int, Future[Any]] = {}
        self._calls = 0
        self._closing = False
        self._ended: Exception | None = None
        start = (settings.log_level, settings.log_format, StorageSpec.of(settings))
        self._conn.send((*start, prefix, name, os.getpid()))
        self._reader = threading.Thread(target=self._read, name=f"snapshots-{name}", daemon=True)
        self._reader.start()
        self.owner = ""

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def exit_code(self) -> int | None:
        """The child's, once it ended: 0 when it stopped as asked, -9 when it was killed."""
        return self._process.poll()

    def open(self, committed: SnapshotRef | None) -> str:
        """Create the store (`SnapshotStore.for_new_incarnation`); return its owner.

        Call it only once this incarnation has fenced its predecessors."""
        self.owner = cast("str", self._call("open", committed).result())
        return self.owner

    def restore(self, ref: SnapshotRef, dest: Path, reuse: bool = True) -> SnapshotInfo:
        return cast("SnapshotInfo", self._call("restore", ref, dest, reuse).result())

    def snapshots(self) -> list[SnapshotRef]:
        return cast("list[SnapshotRef]", self._call("snapshots").result())

    def upload(
        self, checkpoint_id: int, local_dir: Path, meta: dict[str, Any]
    ) -> Future[SnapshotInfo]:
        return self._call("upload", checkpoint_id, local_dir, meta)

    def retain(
        self, committed: SnapshotRef, keep: int
    ) -> Future[dict[SnapshotRef, dict[str, Any]]]:
        return self._call("retain", committed, keep)

    def close(self) -> None:
        """Stop the call under way at its next file, drop the queued ones, end the child.

        Calls not yet answered fail with SnapshotAborted. Calling it twice is harmless."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            os.close(self._lifeline)
            with contextlib.suppress(OSError):  # it has ended already
                self._conn.send((0, "stop", ()))
        try:
            self._process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("%s: the snapshot process did not stop; killing it", self.name)
            self._process.kill()
            self._process.wait()
        self._reader.join()
        self._conn.close()

    def _call(self, method: str, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closing or self._ended is not None:
                future.set_exception(self._ended or SnapshotAborted(f"{self.name}: closed"))
                return future
            self._calls += 1
            self._pending[self._calls] = future
            # Should the child have ended, the reader fails this call with the rest.
            with contextlib.suppress(OSError):
                self._conn.send((self._calls, method, args))
        return future

    def _read(self) -> None:
        """Answers from the child, until it ends; then fail whatever is left."""
        while True:
            try:
                call, ok, value = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.pop(call, None)
            if future is None:
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        try:
            code: int | None = self._process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        with self._lock:
            if self._closing:
                self._ended = SnapshotAborted(f"{self.name}: the task is ending")
            else:
                self._ended = SnapshotProcessDied(
                    f"{self.name}: the snapshot process (pid {self._process.pid}) ended, "
                    f"exit code {code}"
                )
                log.error("%s", self._ended)
            left = list(self._pending.values())
            self._pending.clear()
        for future in left:
            future.set_exception(self._ended)


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling, else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception a store raised must reach the task
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class _Child:
    """The child's side: one SnapshotStore, one call at a time."""

    def __init__(self, conn: Connection, lifeline: int) -> None:
        self.conn = conn
        level, log_format, spec, self.prefix, name, parent = conn.recv()
        configure_logging(level, f"{name}/snapshots", log_format)
        faults.serve(parent)
        self.storage = open_storage(spec)
        self.store: SnapshotStore | None = None
        self.closed = threading.Event()
        self._lock = threading.Lock()  # store vs. the lifeline's close
        threading.Thread(target=self._watch, args=(lifeline,), daemon=True).start()

    def _watch(self, lifeline: int) -> None:
        try:
            while os.read(lifeline, 1):
                pass  # nobody writes to it: only its end counts
        except OSError:
            pass
        with self._lock:
            self.closed.set()
            if self.store is not None:
                self.store.close()

    def serve(self) -> None:
        while True:
            try:
                call, method, args = self.conn.recv()
            except (EOFError, OSError):
                return
            if method == "stop":
                return
            try:
                reply = (call, True, self._run(method, args))
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the task
                reply = (call, False, _portable(exc))
            try:
                self.conn.send(reply)
            except OSError:
                return

    def _run(self, method: str, args: tuple[Any, ...]) -> Any:
        if self.closed.is_set():
            raise SnapshotAborted(f"{self.prefix}: the task is ending")
        if method == "open":
            store = SnapshotStore.for_new_incarnation(self.storage, self.prefix, *args)
            with self._lock:
                self.store = store
                if self.closed.is_set():
                    store.close()
            return store.owner
        if method not in _STORE_CALLS or self.store is None:
            raise ValueError(f"no snapshot call {method!r} (before open?)")
        return getattr(self.store, method)(*args)


def main(argv: list[str]) -> int:
    # It ends when the task says so or its process dies (the lifeline), not with a Ctrl-C
    # to the process group: the worker's shutdown still needs it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    _Child(conn, int(argv[1])).serve()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    logging.shutdown()
    # Without the interpreter's teardown (a tenth of a second): close() waits for this exit.
    os._exit(code)
