"""Incremental upload, verified restore and fenced retention of RocksDB checkpoints.

Layout under `prefix` in a CheckpointStorage:

    <prefix>/<owner>/shared/<lineage>-<name>.sst   immutable table files, shared by checkpoints
    <prefix>/<owner>/chk-<id:012d>/<name>          small mutable files of one checkpoint
    <prefix>/<owner>/chk-<id:012d>/_snapshot.json  manifest, written last: present = complete

**Ownership.** Kafka fences a zombie's transactions, not its writes to storage. So every
incarnation of a task writes under an owner of its own, ``g<generation>-<random>``, and
never overwrites or deletes a file of a newer generation. A snapshot is named by its
checkpoint id *and* owner (`SnapshotRef`); the one that counts is the one the task's committed
transaction names, so whatever a zombie uploads is inert.

**Generations fence garbage collection.** An incarnation takes a generation above every owner
it finds in storage, listing it only after ``init_transactions`` fenced its predecessors.
Retention runs only after a commit of this incarnation's own, and it deletes only files of
its own generation or older that no kept manifest references. A successor started after that
commit (or the commit would have been fenced) and found this owner's manifest, so it has a
higher generation: a retention running late in a paused zombie cannot touch its files.
Nothing is time-based, so clocks and grace periods do not enter the argument.

**Verification.** The manifest records each file's size and CRC-32, and itself ends with the
CRC-32 of its body. Restore checks them all, so a flipped byte is a `SnapshotCorrupt` naming
the file before RocksDB ever opens it, and the task can fall back to an older snapshot.

SST file numbers are unique only within one lineage of a DB: after a restore, the DB can
write a 000015.sst that differs from the 000015.sst uploaded before. Shared keys therefore
carry a lineage id that is new after each restore, and a stored file is only reused through
the in-memory map of what this lineage uploaded or restored, never by name.

Concurrency: one SnapshotStore belongs to one task incarnation. Drive upload() and retain()
from one single-thread executor; an internal lock serializes overlapping calls.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from processor import faults
from processor.state.storage import CheckpointStorage, SnapshotMissing

MANIFEST_NAME = "_snapshot.json"
# Files RocksDB never modifies once written; everything else in a checkpoint
# (CURRENT, MANIFEST-*, OPTIONS-*, *.log, rocksdict-config.json) is per-checkpoint.
_IMMUTABLE_SUFFIXES = (".sst", ".blob")
_OWNER = re.compile(r"g(\d{10})-[0-9a-f]{8}")
_CRC_TRAILER = b"crc32:"
_READ_CHUNK = 1 << 20


class SnapshotCorrupt(SnapshotMissing):
    """A stored snapshot is there but not intact (checksum or size mismatch)."""


class SnapshotAborted(Exception):
    """The store was closed (its task is ending) while an upload was under way."""


@dataclass(frozen=True, order=True)
class SnapshotRef:
    """One stored snapshot: a checkpoint id and the incarnation that wrote it."""

    checkpoint_id: int
    owner: str

    def __str__(self) -> str:
        return f"{self.checkpoint_id} ({self.owner})"


@dataclass(frozen=True)
class SnapshotInfo:
    """What an upload or restore moved.

    For restore(), `full_bytes` is what was downloaded and `uploaded_bytes` and
    `reused_files` are 0; `meta` is what the uploader stored with the snapshot.
    """

    ref: SnapshotRef
    files: int
    reused_files: int
    uploaded_bytes: int
    full_bytes: int
    duration_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> int:
        return self.ref.checkpoint_id


@dataclass(frozen=True)
class _StoredFile:
    key: str
    size: int
    crc32: int


@dataclass(frozen=True)
class _Manifest:
    ref: SnapshotRef
    files: dict[str, _StoredFile]
    parent: SnapshotRef | None
    meta: dict[str, Any]


def owner_name(generation: int) -> str:
    return f"g{generation:010d}-{uuid.uuid4().hex[:8]}"


def generation_of(owner: str) -> int | None:
    """The generation in an owner's name; None for anything this code did not write."""
    match = _OWNER.fullmatch(owner)
    return int(match.group(1)) if match else None


class SnapshotStore:
    def __init__(self, storage: CheckpointStorage, prefix: str, generation: int) -> None:
        prefix = prefix.strip("/")
        if not prefix:
            raise ValueError("snapshot prefix must not be empty")
        self._storage = storage
        self._prefix = prefix
        self._task = prefix.rsplit("/", 1)[-1]  # names the task to fault points
        self.generation = generation
        self.owner = owner_name(generation)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._lineage = _new_lineage()
        # local file name -> where this lineage already stored that exact file.
        self._shared: dict[str, _StoredFile] = {}
        # The snapshot this lineage last uploaded or was restored from.
        self._parent: SnapshotRef | None = None

    @classmethod
    def for_new_incarnation(
        cls, storage: CheckpointStorage, prefix: str, committed: SnapshotRef | None
    ) -> SnapshotStore:
        """A store whose generation is above every owner in storage and ``committed``'s.

        Call it only once this incarnation has fenced its predecessors (init_transactions).
        """
        prefix = prefix.strip("/")
        owners = {_owner_of(prefix, key) for key in storage.list(f"{prefix}/")}
        if committed is not None:
            owners.add(committed.owner)
        generations = [g for g in map(generation_of, owners) if g is not None]
        return cls(storage, prefix, max(generations, default=0) + 1)

    @property
    def prefix(self) -> str:
        return self._prefix

    def close(self) -> None:
        """Stop an upload under way at its next file; later uploads fail at once."""
        self._closed.set()

    def upload(
        self, checkpoint_id: int, local_dir: Path, meta: dict[str, Any] | None = None
    ) -> SnapshotInfo:
        """Store the RocksDB checkpoint in `local_dir` as (`checkpoint_id`, this owner).

        Blocking; meant for a background thread. `local_dir` is removed afterwards,
        whether or not the upload succeeded, so the hard-linked SSTs it pins do not
        leak disk when a failed checkpoint is simply abandoned.
        """
        with self._lock:
            try:
                return self._upload(checkpoint_id, local_dir, meta or {})
            finally:
                shutil.rmtree(local_dir, ignore_errors=True)

    def restore(self, ref: SnapshotRef, dest: Path, reuse: bool = True) -> SnapshotInfo:
        """Download and verify snapshot `ref` into `dest` (absent or empty).

        `dest` appears only once every file is there and intact. With `reuse`, later uploads
        reuse the restored SSTs instead of copying them again; restore the committed
        snapshot that way. A fallback to any other snapshot must not: an older generation's
        retention keeps its own last commit's files, not necessarily those of another one.
        """
        with self._lock:
            return self._restore(ref, dest, reuse)

    def snapshots(self) -> list[SnapshotRef]:
        """Complete snapshots (manifest present) of every owner, oldest first."""
        return sorted(self._manifests(self._storage.list(f"{self._prefix}/")))

    def retain(self, committed: SnapshotRef, keep: int = 2) -> dict[SnapshotRef, dict[str, Any]]:
        """Delete what no restore can need any more; return the kept snapshots' meta.

        Keeps `committed`, this owner's snapshots above it (those may still be completing)
        and up to `keep - 1` complete ancestors of `committed` (each manifest names the
        snapshot its lineage last uploaded or was restored from). Deletes every other file of
        this generation or an older one; never a newer generation's (see the module doc).
        """
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        with self._lock:
            return self._retain(committed, keep)

    def _upload(self, checkpoint_id: int, local_dir: Path, meta: dict[str, Any]) -> SnapshotInfo:
        started = time.monotonic()
        entries = sorted(local_dir.iterdir())
        if any(not entry.is_file() for entry in entries):
            raise ValueError(f"{local_dir} is not a flat RocksDB checkpoint directory")
        if not self._follows_lineage(entries):
            # Same name, different file: this DB is not the lineage the store has been
            # following. Start a new one rather than reuse a file that is not this one.
            self._lineage = _new_lineage()
            self._shared = {}
            self._parent = None
        ref = SnapshotRef(checkpoint_id, self.owner)
        files: dict[str, _StoredFile] = {}
        shared: dict[str, _StoredFile] = {}
        reused = uploaded_bytes = full_bytes = 0
        for entry in entries:
            self._check_open()
            name, size = entry.name, entry.stat().st_size
            full_bytes += size
            stored = self._shared.get(name) if name.endswith(_IMMUTABLE_SUFFIXES) else None
            if stored is not None:
                reused += 1
            else:
                if name.endswith(_IMMUTABLE_SUFFIXES):
                    key = f"{self._owner_prefix()}/shared/{self._lineage}-{name}"
                else:
                    key = self._chk_key(ref, name)
                stored = _StoredFile(key, size, _crc32_file(entry))
                self._storage.put_immutable_file(key, entry)
                uploaded_bytes += size
            if name.endswith(_IMMUTABLE_SUFFIXES):
                shared[name] = stored
            files[name] = stored

        body = {
            "format": 2,
            "checkpoint_id": checkpoint_id,
            "owner": self.owner,
            "files": {name: f.key for name, f in files.items()},
            "sizes": {name: f.size for name, f in files.items()},
            "crc32": {name: f.crc32 for name, f in files.items()},
            "parent": _ref_json(self._parent),
            "meta": meta,
            "full_bytes": full_bytes,
            "uploaded_bytes": uploaded_bytes,
            "created_at": datetime.now(UTC).isoformat(),
        }
        faults.reach("snapshot_uploading", self._task)
        self._check_open()
        self._storage.put_bytes(self._chk_key(ref, MANIFEST_NAME), seal_manifest(body))
        # A lineage never brings back a file number it compacted away, so only
        # the files of the latest checkpoint can be reused.
        self._shared = shared
        self._parent = ref
        return SnapshotInfo(
            ref=ref,
            files=len(files),
            reused_files=reused,
            uploaded_bytes=uploaded_bytes,
            full_bytes=full_bytes,
            duration_s=time.monotonic() - started,
            meta=meta,
        )

    def _restore(self, ref: SnapshotRef, dest: Path, reuse: bool) -> SnapshotInfo:
        started = time.monotonic()
        if dest.exists() and any(dest.iterdir()):
            raise FileExistsError(f"restore target {dest} is not empty")
        manifest = self._read_manifest(ref)
        staging = dest.with_name(f".{dest.name}.restoring-{uuid.uuid4().hex[:8]}")
        staging.mkdir(parents=True)
        try:
            for name, stored in manifest.files.items():
                target = staging / name
                try:
                    self._storage.get_file(stored.key, target)
                except SnapshotMissing as exc:
                    raise self._missing(ref, f"file {name} missing ({stored.key})") from exc
                size = target.stat().st_size
                if size != stored.size:
                    raise self._corrupt(ref, f"file {name} has {size} bytes, not {stored.size}")
                crc = _crc32_file(target)
                if crc != stored.crc32:
                    raise self._corrupt(
                        ref, f"file {name} is corrupt (CRC-32 {crc:08x}, not {stored.crc32:08x})"
                    )
            faults.reach("restoring", self._task)
            if dest.exists():
                dest.rmdir()
            staging.rename(dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

        # The restored DB starts a new lineage: its next file numbers may collide with
        # files uploaded after this checkpoint by this or another incarnation.
        self._lineage = _new_lineage()
        self._shared = (
            {n: f for n, f in manifest.files.items() if n.endswith(_IMMUTABLE_SUFFIXES)}
            if reuse
            else {}
        )
        self._parent = ref
        return SnapshotInfo(
            ref=ref,
            files=len(manifest.files),
            reused_files=0,
            uploaded_bytes=0,
            full_bytes=sum(f.size for f in manifest.files.values()),
            duration_s=time.monotonic() - started,
            meta=manifest.meta,
        )

    def _retain(self, committed: SnapshotRef, keep: int) -> dict[SnapshotRef, dict[str, Any]]:
        keys = self._storage.list(f"{self._prefix}/")
        complete = self._manifests(keys)
        if committed not in complete:
            # Deleting older snapshots now could leave nothing restorable.
            raise self._missing(committed, "manifest missing, nothing deleted")
        kept = {committed: self._read_manifest(committed)}
        for ref in complete:
            if ref.owner == self.owner and ref.checkpoint_id > committed.checkpoint_id:
                kept[ref] = self._read_manifest(ref)
        # Fallbacks are the committed snapshot's ancestors, not merely the newest older
        # ones: after a crash those can belong to a dead lineage that never committed.
        parent = kept[committed].parent
        for _ in range(keep - 1):
            if parent is None or parent not in complete or parent in kept:
                break
            kept[parent] = self._read_manifest(parent)
            parent = kept[parent].parent

        referenced = {self._chk_key(ref, MANIFEST_NAME) for ref in kept}
        referenced.update(f.key for manifest in kept.values() for f in manifest.files.values())
        doomed = []
        for key in keys:
            generation = generation_of(_owner_of(self._prefix, key))
            if generation is not None and generation <= self.generation and key not in referenced:
                doomed.append(key)
        # Manifests first: a snapshot stopped halfway reads as incomplete, never as
        # complete with files missing.
        doomed.sort(key=lambda key: not key.endswith("/" + MANIFEST_NAME))
        for key in doomed:
            self._storage.delete(key)
        # Anything unreferenced is gone now; a later upload must copy it again.
        self._shared = {n: f for n, f in self._shared.items() if f.key in referenced}
        return {ref: manifest.meta for ref, manifest in kept.items()}

    def _follows_lineage(self, entries: list[Path]) -> bool:
        for entry in entries:
            stored = self._shared.get(entry.name)
            if stored is not None and stored.size != entry.stat().st_size:
                return False
        return True

    def _manifests(self, keys: list[str]) -> set[SnapshotRef]:
        refs = set()
        suffix = "/" + MANIFEST_NAME
        for key in keys:
            if not key.endswith(suffix):
                continue
            owner, _, rest = key[len(self._prefix) + 1 :].partition("/")
            chk = rest[: -len(suffix)]
            digits = chk.removeprefix("chk-")
            if chk.startswith("chk-") and digits.isascii() and digits.isdigit():
                refs.add(SnapshotRef(int(digits), owner))
        return refs

    def _read_manifest(self, ref: SnapshotRef) -> _Manifest:
        try:
            raw = self._storage.get_bytes(self._chk_key(ref, MANIFEST_NAME))
        except SnapshotMissing as exc:
            raise self._missing(ref, "manifest missing") from exc
        try:
            return _parse_manifest(ref, unseal_manifest(raw))
        except (ValueError, TypeError) as exc:
            raise self._corrupt(ref, f"manifest unreadable: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise SnapshotAborted(f"{self._prefix}: the task is ending")

    def _missing(self, ref: SnapshotRef, what: str) -> SnapshotMissing:
        return SnapshotMissing(f"checkpoint {ref} of {self._prefix}: {what}")

    def _corrupt(self, ref: SnapshotRef, what: str) -> SnapshotCorrupt:
        return SnapshotCorrupt(f"checkpoint {ref} of {self._prefix}: {what}")

    def _owner_prefix(self) -> str:
        return f"{self._prefix}/{self.owner}"

    def _chk_key(self, ref: SnapshotRef, name: str) -> str:
        return f"{self._prefix}/{ref.owner}/chk-{ref.checkpoint_id:012d}/{name}"


def _owner_of(prefix: str, key: str) -> str:
    return key[len(prefix) + 1 :].partition("/")[0]


def _new_lineage() -> str:
    return uuid.uuid4().hex[:8]


def _crc32_file(path: Path) -> int:
    crc = 0
    with path.open("rb") as source:
        # zlib releases the GIL on large buffers: the task threads keep running meanwhile.
        while chunk := source.read(_READ_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def seal_manifest(body: dict[str, Any]) -> bytes:
    """The manifest's bytes: JSON, then a line with its CRC-32 (a flipped digit in a
    position or a size would otherwise still parse)."""
    data = json.dumps(body, indent=1, sort_keys=True).encode()
    return data + b"\n" + _CRC_TRAILER + b"%08x\n" % zlib.crc32(data)


def unseal_manifest(raw: bytes) -> Any:
    """A stored manifest's JSON document; ValueError unless its checksum holds."""
    data, _, trailer = raw.rstrip(b"\n").rpartition(b"\n")
    if trailer != _CRC_TRAILER + b"%08x" % zlib.crc32(data):
        raise ValueError("checksum mismatch")
    return json.loads(data)


def _ref_json(ref: SnapshotRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"checkpoint_id": ref.checkpoint_id, "owner": ref.owner}


def _parse_ref(doc: Any) -> SnapshotRef | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ValueError("bad 'parent'")
    checkpoint_id, owner = doc.get("checkpoint_id"), doc.get("owner")
    if type(checkpoint_id) is not int or not isinstance(owner, str) or "/" in owner:
        raise ValueError("bad 'parent'")
    return SnapshotRef(checkpoint_id, owner)


def _parse_manifest(ref: SnapshotRef, doc: Any) -> _Manifest:
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("checkpoint_id") != ref.checkpoint_id or doc.get("owner") != ref.owner:
        raise ValueError("it names another snapshot")
    files, sizes, crcs = doc.get("files"), doc.get("sizes"), doc.get("crc32")
    if not isinstance(files, dict) or not isinstance(sizes, dict) or not isinstance(crcs, dict):
        raise ValueError("no 'files', 'sizes' or 'crc32' mapping")
    stored: dict[str, _StoredFile] = {}
    for name, key in files.items():
        size, crc = sizes.get(name), crcs.get(name)
        # Names become paths on restore: never let stored data escape `dest`.
        if (
            not isinstance(key, str)
            or not name
            or name in (".", "..")
            or "/" in name
            or "\0" in name
        ):
            raise ValueError(f"bad file entry {name!r}")
        if type(size) is not int or type(crc) is not int:
            raise ValueError(f"no size or CRC-32 for {name!r}")
        stored[name] = _StoredFile(key, size, crc)
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError("bad 'meta'")
    return _Manifest(ref=ref, files=stored, parent=_parse_ref(doc.get("parent")), meta=meta)
