"""Incremental upload, restore and retention of RocksDB checkpoints.

Layout under `prefix` in a CheckpointStorage:

    <prefix>/shared/<session>-<name>.sst   immutable table files, shared by checkpoints
    <prefix>/chk-<id:012d>/<name>          small mutable files of one checkpoint
    <prefix>/chk-<id:012d>/_snapshot.json  manifest, written last: present = complete

SST file numbers are unique only within one lineage of a DB. After a crash and a
restore from checkpoint n, the DB can produce a 000015.sst whose content differs
from the 000015.sst a crashed incarnation produced (and perhaps uploaded) after n.
Shared keys therefore carry a session id that is new for each lineage (each
SnapshotStore and each restore()), and a stored file is only ever reused through
the in-memory map of what *this* lineage uploaded or restored, never by name.
Restore and upload through the same SnapshotStore: that is what lets the first
upload after a restore reuse the restored SSTs and record its ancestry.

Concurrency: one SnapshotStore belongs to one task and should be driven from one
place, e.g. upload() on a single-thread executor and retain() submitted to that
same executor once the upload it follows has finished. An internal lock makes
overlapping calls wait for each other rather than interleave, but the owner
thread should not call retain() directly while an upload runs or it will block.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from processor import faults
from processor.state.storage import CheckpointStorage, SnapshotMissing

MANIFEST_NAME = "_snapshot.json"
# Files RocksDB never modifies once written; everything else in a checkpoint
# (CURRENT, MANIFEST-*, OPTIONS-*, *.log, rocksdict-config.json) is per-checkpoint.
_IMMUTABLE_SUFFIXES = (".sst", ".blob")


@dataclass(frozen=True)
class SnapshotInfo:
    """What an upload or restore moved.

    For restore(), `full_bytes` is what was downloaded and `uploaded_bytes` and
    `reused_files` are 0.
    """

    checkpoint_id: int
    files: int
    reused_files: int
    uploaded_bytes: int
    full_bytes: int
    duration_s: float


@dataclass(frozen=True)
class _StoredFile:
    key: str
    size: int


@dataclass(frozen=True)
class _Manifest:
    files: dict[str, str]
    sizes: dict[str, int]
    parent: int | None
    meta: dict[str, Any]


class SnapshotStore:
    def __init__(self, storage: CheckpointStorage, prefix: str) -> None:
        prefix = prefix.strip("/")
        if not prefix:
            raise ValueError("snapshot prefix must not be empty")
        self._storage = storage
        self._prefix = prefix
        self._task = prefix.rsplit("/", 1)[-1]  # names the task to fault points
        self._lock = threading.Lock()
        self._session = _new_session()
        # local file name -> where this lineage already stored that exact file.
        self._shared: dict[str, _StoredFile] = {}
        # The checkpoint this lineage last uploaded or was restored from.
        self._parent: int | None = None

    @property
    def prefix(self) -> str:
        return self._prefix

    def upload(
        self, checkpoint_id: int, local_dir: Path, meta: dict[str, Any] | None = None
    ) -> SnapshotInfo:
        """Store the RocksDB checkpoint in `local_dir` as `checkpoint_id`.

        Blocking; meant for a background thread. `local_dir` is removed afterwards,
        whether or not the upload succeeded, so the hard-linked SSTs it pins do not
        leak disk when a failed checkpoint is simply abandoned.
        """
        with self._lock:
            try:
                return self._upload(checkpoint_id, local_dir, meta or {})
            finally:
                shutil.rmtree(local_dir, ignore_errors=True)

    def restore(self, checkpoint_id: int, dest: Path) -> SnapshotInfo:
        """Download checkpoint `checkpoint_id` into `dest` (absent or empty).

        `dest` appears only once every file is there. Later uploads from this
        store reuse the restored SSTs instead of copying them again.
        """
        with self._lock:
            return self._restore(checkpoint_id, dest)

    def meta(self, checkpoint_id: int) -> dict[str, Any]:
        """What the owner stored with the snapshot (e.g. its input positions)."""
        with self._lock:
            return self._read_manifest(checkpoint_id).meta

    def checkpoints(self) -> list[int]:
        """Ids of complete snapshots (manifest present), ascending."""
        suffix = "/" + MANIFEST_NAME
        keys = self._storage.list(self._chk_list_prefix())
        ids = {self._checkpoint_id_of(key) for key in keys if key.endswith(suffix)}
        return sorted(checkpoint_id for checkpoint_id in ids if checkpoint_id is not None)

    def retain(self, committed_id: int, keep: int = 2) -> None:
        """Delete snapshots no restore can need any more.

        Keeps `committed_id`, every id above it (those may still be completing),
        and up to `keep - 1` complete ancestors of `committed_id` (each manifest
        names the checkpoint its lineage last uploaded or was restored from; in a
        run without crashes these are simply the newest older ones). Everything
        else under the prefix goes, then shared files no kept manifest references.
        """
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        with self._lock:
            self._retain(committed_id, keep)

    def _upload(self, checkpoint_id: int, local_dir: Path, meta: dict[str, Any]) -> SnapshotInfo:
        started = time.monotonic()
        entries = sorted(local_dir.iterdir())
        if any(not entry.is_file() for entry in entries):
            raise ValueError(f"{local_dir} is not a flat RocksDB checkpoint directory")
        if not self._follows_lineage(entries):
            # Same name, different file: this DB is not the lineage the store has
            # been following. Start a new one rather than risk reusing, or
            # overwriting, a file that an older manifest references.
            self._session = _new_session()
            self._shared = {}
            self._parent = None
        # A crashed incarnation may have left files (even a manifest) under this id.
        self._delete_checkpoint(checkpoint_id)

        files: dict[str, str] = {}
        sizes: dict[str, int] = {}
        shared: dict[str, _StoredFile] = {}
        reused = uploaded_bytes = full_bytes = 0
        for entry in entries:
            name, size = entry.name, entry.stat().st_size
            full_bytes += size
            if name.endswith(_IMMUTABLE_SUFFIXES):
                stored = self._shared.get(name)
                if stored is None:
                    stored = _StoredFile(self._shared_key(name), size)
                    self._storage.put_immutable_file(stored.key, entry)
                    uploaded_bytes += size
                    self._shared[name] = stored
                else:
                    reused += 1
                shared[name] = stored
                key = stored.key
            else:
                key = self._chk_key(checkpoint_id, name)
                self._storage.put_immutable_file(key, entry)
                uploaded_bytes += size
            files[name] = key
            sizes[name] = size

        manifest = {
            "checkpoint_id": checkpoint_id,
            "files": files,
            "sizes": sizes,
            "session": self._session,
            "parent": self._parent,
            "meta": meta,
            "full_bytes": full_bytes,
            "uploaded_bytes": uploaded_bytes,
            "created_at": datetime.now(UTC).isoformat(),
        }
        payload = json.dumps(manifest, indent=1, sort_keys=True).encode()
        faults.reach("snapshot_uploading", self._task)
        self._storage.put_bytes(self._chk_key(checkpoint_id, MANIFEST_NAME), payload)
        # A lineage never brings back a file number it compacted away, so only
        # the files of the latest checkpoint can be reused.
        self._shared = shared
        self._parent = checkpoint_id
        return SnapshotInfo(
            checkpoint_id=checkpoint_id,
            files=len(files),
            reused_files=reused,
            uploaded_bytes=uploaded_bytes,
            full_bytes=full_bytes,
            duration_s=time.monotonic() - started,
        )

    def _restore(self, checkpoint_id: int, dest: Path) -> SnapshotInfo:
        started = time.monotonic()
        if dest.exists() and any(dest.iterdir()):
            raise FileExistsError(f"restore target {dest} is not empty")
        manifest = self._read_manifest(checkpoint_id)
        staging = dest.with_name(f".{dest.name}.restoring-{uuid.uuid4().hex[:8]}")
        staging.mkdir(parents=True)
        sizes: dict[str, int] = {}
        try:
            for name, key in manifest.files.items():
                target = staging / name
                try:
                    self._storage.get_file(key, target)
                except SnapshotMissing as exc:
                    raise self._missing(checkpoint_id, f"file {name} missing ({key})") from exc
                size = target.stat().st_size
                expected = manifest.sizes.get(name)
                if expected is not None and size != expected:
                    raise self._missing(
                        checkpoint_id, f"file {name} has {size} bytes, expected {expected}"
                    )
                sizes[name] = size
            faults.reach("restoring", self._task)
            if dest.exists():
                dest.rmdir()
            staging.rename(dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

        # The restored DB starts a new lineage: its next file numbers may collide
        # with files uploaded after this checkpoint by this or a crashed session.
        self._session = _new_session()
        self._shared = {
            name: _StoredFile(key, sizes[name])
            for name, key in manifest.files.items()
            if name.endswith(_IMMUTABLE_SUFFIXES)
        }
        self._parent = checkpoint_id
        return SnapshotInfo(
            checkpoint_id=checkpoint_id,
            files=len(manifest.files),
            reused_files=0,
            uploaded_bytes=0,
            full_bytes=sum(sizes.values()),
            duration_s=time.monotonic() - started,
        )

    def _retain(self, committed_id: int, keep: int) -> None:
        complete = self.checkpoints()
        if committed_id not in complete:
            # Deleting older snapshots now could leave nothing restorable.
            raise self._missing(committed_id, "manifest missing, nothing deleted")
        kept = {c: self._read_manifest(c) for c in complete if c >= committed_id}
        # Fallbacks are the committed checkpoint's ancestors, not merely the newest
        # older ids: after a crash those can belong to a dead lineage whose
        # checkpoints never committed and can never be restored.
        parent = kept[committed_id].parent
        for _ in range(keep - 1):
            if parent is None or parent not in complete or parent in kept:
                break
            kept[parent] = self._read_manifest(parent)
            parent = kept[parent].parent

        for checkpoint_id in self._stored_checkpoint_ids():
            if checkpoint_id < committed_id and checkpoint_id not in kept:
                self._delete_checkpoint(checkpoint_id)

        referenced = {key for manifest in kept.values() for key in manifest.files.values()}
        for key in self._storage.list(f"{self._prefix}/shared/"):
            if key not in referenced:
                self._storage.delete(key)
        # Uploads are serialized with retain, so anything unreferenced came from a
        # failed upload and is gone now; a later upload must copy it again.
        self._shared = {
            name: stored for name, stored in self._shared.items() if stored.key in referenced
        }

    def _follows_lineage(self, entries: list[Path]) -> bool:
        for entry in entries:
            stored = self._shared.get(entry.name)
            if stored is not None and stored.size != entry.stat().st_size:
                return False
        return True

    def _delete_checkpoint(self, checkpoint_id: int) -> None:
        keys = self._storage.list(self._chk_key(checkpoint_id, ""))
        manifest_key = self._chk_key(checkpoint_id, MANIFEST_NAME)
        # Manifest first: if we stop halfway the snapshot reads as incomplete,
        # never as complete with files missing.
        if manifest_key in keys:
            self._storage.delete(manifest_key)
        for key in keys:
            if key != manifest_key:
                self._storage.delete(key)

    def _stored_checkpoint_ids(self) -> set[int]:
        """Ids with anything stored, complete or not."""
        ids = (self._checkpoint_id_of(k) for k in self._storage.list(self._chk_list_prefix()))
        return {checkpoint_id for checkpoint_id in ids if checkpoint_id is not None}

    def _read_manifest(self, checkpoint_id: int) -> _Manifest:
        try:
            raw = self._storage.get_bytes(self._chk_key(checkpoint_id, MANIFEST_NAME))
        except SnapshotMissing as exc:
            raise self._missing(checkpoint_id, "manifest missing") from exc
        try:
            return _parse_manifest(json.loads(raw))
        except (ValueError, TypeError) as exc:
            raise self._missing(checkpoint_id, f"manifest unreadable: {exc}") from exc

    def _missing(self, checkpoint_id: int, what: str) -> SnapshotMissing:
        return SnapshotMissing(f"checkpoint {checkpoint_id} of {self._prefix}: {what}")

    def _checkpoint_id_of(self, key: str) -> int | None:
        rest = key[len(self._chk_list_prefix()) :]
        digits, slash, _ = rest.partition("/")
        return int(digits) if slash and digits.isascii() and digits.isdigit() else None

    def _chk_list_prefix(self) -> str:
        return f"{self._prefix}/chk-"

    def _chk_key(self, checkpoint_id: int, name: str) -> str:
        return f"{self._prefix}/chk-{checkpoint_id:012d}/{name}"

    def _shared_key(self, name: str) -> str:
        return f"{self._prefix}/shared/{self._session}-{name}"


def _new_session() -> str:
    return uuid.uuid4().hex[:12]


def _parse_manifest(doc: Any) -> _Manifest:
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    files = doc.get("files")
    if not isinstance(files, dict):
        raise ValueError("no 'files' mapping")
    for name, key in files.items():
        # Names become paths on restore: never let stored data escape `dest`.
        if not isinstance(key, str) or not name or "/" in name or name in (".", ".."):
            raise ValueError(f"bad file entry {name!r}")
    sizes = doc.get("sizes", {})
    if not isinstance(sizes, dict) or not all(isinstance(v, int) for v in sizes.values()):
        raise ValueError("bad 'sizes' mapping")
    parent = doc.get("parent")
    if parent is not None and not isinstance(parent, int):
        raise ValueError("bad 'parent'")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError("bad 'meta'")
    return _Manifest(files=dict(files), sizes=dict(sizes), parent=parent, meta=meta)
