"""Where checkpoint files live once they leave the task's local disk.

The protocol is shaped like an object store (flat '/'-separated keys, whole-object
puts, prefix listing) so an S3 implementation can be added without touching the
snapshot logic; `DirectoryStorage` maps it onto a local or mounted filesystem.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

_COPY_CHUNK = 1 << 20
# Writers stage data under this name prefix; keys may not use it so a staged
# file can never be mistaken for (or collide with) a real object.
_TMP_PREFIX = ".tmp-"
# A concurrent delete() may prune a directory between our mkdir and our open.
_PUT_ATTEMPTS = 3


class SnapshotMissing(Exception):
    """A checkpoint, or an object it needs, is not in storage."""


class CheckpointStorage(Protocol):
    """Durable key -> bytes store used for checkpoints.

    Puts are atomic (readers see the old object or the new one, never a torn one)
    and durable once they return, so "object present" can be used as a commit marker.
    """

    def put_file(self, key: str, src: Path) -> None: ...

    def put_immutable_file(self, key: str, src: Path) -> None:
        """put_file for a source that is never modified (it may be stored by reference)."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_file(self, key: str, dest: Path) -> None:
        """Copy the object to `dest`; raise SnapshotMissing if there is none."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """Raise SnapshotMissing if there is no such object."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Keys starting with `prefix` (a plain string prefix, as in S3), sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error."""
        ...


class DirectoryStorage:
    """CheckpointStorage on a directory tree: key 'a/b/c' is the file root/a/b/c."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put_file(self, key: str, src: Path) -> None:
        with src.open("rb") as source:
            self._put(key, lambda out: shutil.copyfileobj(source, out, _COPY_CHUNK))

    def put_immutable_file(self, key: str, src: Path) -> None:
        """Like put_file, for a source nobody will change: a hard link where one can be made.

        RocksDB writes its files once and never modifies them, so on the same filesystem a
        link is a copy without the I/O (and without a dozen system calls, each a chance for
        the uploading thread to wait for the GIL behind the task threads).
        """
        path = self._path(key)
        tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}-{path.name}")
        self._make_dirs(tmp.parent)
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem, or links not supported: copy
            self.put_file(key, src)
            return
        try:
            # Cheap when the data is on disk already (RocksDB syncs the files it writes).
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._put(key, lambda out: out.write(data))

    def get_file(self, key: str, dest: Path) -> None:
        path = self._path(key)
        tmp = dest.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}-{dest.name}")
        try:
            with path.open("rb") as source, tmp.open("wb") as out:
                shutil.copyfileobj(source, out, _COPY_CHUNK)
            # Rename so an interrupted copy never leaves a plausible-looking file.
            tmp.replace(dest)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            if not path.is_file():
                raise SnapshotMissing(f"key {key!r} missing from {self.root}") from None
            raise
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise SnapshotMissing(f"key {key!r} missing from {self.root}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        # Only the directory part of the prefix can be walked; the rest filters names.
        directory, _, _ = prefix.rpartition("/")
        base = self._path(directory) if directory else self.root
        if not base.is_dir():
            return []
        keys = [key for key in self._walk(base) if key.startswith(prefix)]
        return sorted(keys)

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        # Object stores have no directories; prune ours so per-checkpoint
        # directories do not pile up forever after their files are gone.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def _put(self, key: str, write: Callable[[BinaryIO], object]) -> None:
        path = self._path(key)
        tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}-{path.name}")
        try:
            with self._create(tmp) as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        # The rename is only durable once the directory entry is.
        _fsync_dir(path.parent)

    def _create(self, tmp: Path) -> BinaryIO:
        attempts_left = _PUT_ATTEMPTS
        while True:
            self._make_dirs(tmp.parent)
            try:
                return tmp.open("xb")
            except FileNotFoundError:
                attempts_left -= 1
                if not attempts_left:
                    raise

    def _make_dirs(self, directory: Path) -> None:
        missing: list[Path] = []
        while not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for new in reversed(missing):
            new.mkdir(exist_ok=True)
            # A new directory is only durable once its parent's entry for it is.
            _fsync_dir(new.parent)

    def _walk(self, base: Path) -> Iterator[str]:
        for dirpath, _, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                yield name if rel == Path(".") else f"{rel.as_posix()}/{name}"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key))


def check_key(key: str) -> list[str]:
    """The parts of a valid key; raise ValueError for one that is not.

    Every storage accepts the same keys, so a layout that works on one works on all: no
    empty, '.' or '..' parts (a path outside the tree), no backslash, no staging names.
    """
    parts = key.split("/")
    if not key or "\\" in key:
        raise ValueError(f"invalid storage key {key!r}")
    for part in parts:
        if part in ("", ".", "..") or part.startswith(_TMP_PREFIX):
            raise ValueError(f"invalid storage key {key!r}")
    return parts


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
