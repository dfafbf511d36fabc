"""Savepoints: a completed checkpoint copied out of the job's reach, kept until deleted.

Layout, under ``savepoints/<name>/`` of the checkpoint storage (or at a location of its own):

    <task>/<owner>/...        each keyed task's snapshot, stored and verified as a checkpoint's
                              (`SnapshotStore`: sizes and CRC-32 of every file), with its
                              metadata (its watermarks: the new job's lateness floors,
                              `inherited_floors`)
    _savepoint.json           written last (present = complete): the checkpoint id, the
                              source positions, the keyed tasks and their operators

A savepoint is a copy, not a reference: the job's retention never deletes from it, and it
outlives the job. It holds what a completed checkpoint holds, for an acyclic graph no
in-flight data: source positions and operator state. A job started from it commits the source
positions as its own, and each keyed task loads the keys of its partition from *every* saved
task of its operators (`load_partition`), so the number of shuffle partitions may change:
state is redistributed by key, with the partition function of the shuffle.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from processor.config import S3Location, Settings
from processor.engine.floors import Floors
from processor.engine.time import NO_WATERMARK
from processor.state.factory import open_storage
from processor.state.rocksdb.snapshots import (
    SnapshotInfo,
    SnapshotRef,
    SnapshotStore,
    seal_manifest,
    unseal_manifest,
)
from processor.state.rocksdb.store import RocksDBStore
from processor.state.storage import CheckpointStorage, SnapshotMissing

ROOT = "savepoints"
MANIFEST_NAME = "_savepoint.json"
# A savepoint's name is one path segment of the storage: `--name a/b` nested a savepoint
# `--list` could not see, and `--name ../../x` reached out of the savepoint area.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")
MAX_NAME_CHARS = 128


def check_name(name: str) -> str:
    """``name`` if it can name a savepoint, else SavepointError (one line).

    >>> check_name("wordcount-20261202-101500")
    'wordcount-20261202-101500'
    """
    if len(name) > MAX_NAME_CHARS or not NAME_PATTERN.fullmatch(name):
        raise SavepointError(
            f"savepoint name {name[:MAX_NAME_CHARS]!r}: letters, digits, '-' and '_', with "
            f"single dots between them, at most {MAX_NAME_CHARS} characters"
        )
    return name


_WRITE_BATCH = 10_000


class SavepointError(Exception):
    """A savepoint that cannot be taken, found or used; the message is one line."""


@dataclass(frozen=True)
class Savepoint:
    name: str
    job: str
    checkpoint_id: int
    created_at: str
    state_format: str
    # Source topic -> partition -> the offset to resume at.
    sources: dict[str, dict[int, int]]
    # Keyed task -> the owner of its snapshot under <task>/ (the checkpoint id is shared).
    tasks: dict[str, str]
    # Operators with state, by the stage that ran them.
    operators: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job": self.job,
            "checkpoint_id": self.checkpoint_id,
            "created_at": self.created_at,
            "state_format": self.state_format,
            "sources": {t: {str(p): o for p, o in ps.items()} for t, ps in self.sources.items()},
            "tasks": self.tasks,
            "operators": self.operators,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Savepoint:
        try:
            return cls(
                name=str(doc["name"]),
                job=str(doc["job"]),
                checkpoint_id=int(doc["checkpoint_id"]),
                created_at=str(doc["created_at"]),
                state_format=str(doc["state_format"]),
                sources={
                    str(t): {int(p): int(o) for p, o in ps.items()}
                    for t, ps in doc["sources"].items()
                },
                tasks={str(t): str(o) for t, o in doc["tasks"].items()},
                operators={str(s): [str(n) for n in ns] for s, ns in doc["operators"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a savepoint manifest ({exc})") from None

    @property
    def stateful_operators(self) -> set[str]:
        return {n for names in self.operators.values() for n in names}


class SavepointStore:
    """The savepoints under ``prefix`` of a storage (``savepoints`` of the checkpoint storage,
    or "" for a savepoint given by its own location)."""

    def __init__(self, storage: CheckpointStorage, prefix: str = ROOT) -> None:
        self._storage = storage
        self._prefix = prefix.strip("/")

    def _key(self, name: str, *rest: str) -> str:
        if self._prefix or name:  # "" with no prefix: a savepoint at a location of its own
            check_name(name)
        return "/".join(p for p in (self._prefix, name, *rest) if p)

    def names(self) -> list[str]:
        """Complete savepoints, by name."""
        base = f"{self._prefix}/" if self._prefix else ""
        found = set()
        for key in self._storage.list(base):
            rest = key[len(base) :].split("/")
            if len(rest) == 2 and rest[1] == MANIFEST_NAME:
                found.add(rest[0])
        return sorted(found)

    def exists(self, name: str) -> bool:
        return self._storage.exists(self._key(name, MANIFEST_NAME))

    def read(self, name: str) -> Savepoint:
        key = self._key(name, MANIFEST_NAME)
        try:
            raw = self._storage.get_bytes(key)
        except SnapshotMissing:
            raise SavepointError(f"no savepoint {name!r} ({key} not found)") from None
        try:
            return Savepoint.from_json(unseal_manifest(raw))
        except ValueError as exc:
            raise SavepointError(f"savepoint {name!r} is corrupt: {key}: {exc}") from None

    def save(
        self,
        savepoint: Savepoint,
        snapshots: CheckpointStorage,
        job_prefix: str,
        workdir: Path,
    ) -> None:
        """Copy each keyed task's snapshot of ``savepoint.checkpoint_id`` (verified on the
        way) from the job's ``snapshots`` storage, then publish the manifest."""
        if self.exists(savepoint.name):
            raise SavepointError(f"savepoint {savepoint.name!r} exists already")
        copied: dict[str, str] = {}
        for task, owner in sorted(savepoint.tasks.items()):
            source = SnapshotStore(snapshots, f"{job_prefix}/{task}", generation=0)
            local = workdir / task
            ref = SnapshotRef(savepoint.checkpoint_id, owner)
            meta = source.restore(ref, local, reuse=False).meta
            target = SnapshotStore(self._storage, self._key(savepoint.name, task), generation=1)
            # The task's metadata goes along: its watermarks are the new job's floors.
            meta = {**meta, "savepoint": savepoint.name}
            info = target.upload(savepoint.checkpoint_id, local, meta)
            copied[task] = info.ref.owner
        done = Savepoint(**{**savepoint.__dict__, "tasks": copied})
        self._storage.put_bytes(
            self._key(savepoint.name, MANIFEST_NAME), seal_manifest(done.to_json())
        )

    def delete(self, name: str, job: str | None = None) -> int:
        """Delete a savepoint (its manifest first: it is never seen half deleted).

        ``job``: refuse unless the savepoint is that job's (None: whichever job's it is)."""
        if not self.exists(name):
            raise SavepointError(f"no savepoint {name!r}")
        if job is not None:
            try:
                owner = self.read(name).job
            except SavepointError as exc:
                raise SavepointError(f"{exc}: --force deletes it anyway") from None
            if owner != job:
                raise SavepointError(
                    f"savepoint {name!r} is job {owner}'s, not {job}'s: --force deletes it anyway"
                )
        self._storage.delete(self._key(name, MANIFEST_NAME))
        keys = self._storage.list(self._key(name) + "/")
        for key in keys:
            self._storage.delete(key)
        return len(keys) + 1

    def restore_task(self, savepoint: Savepoint, task: str, dest: Path) -> SnapshotInfo:
        """Task ``task``'s saved snapshot, whole, into ``dest`` (a keyed source's task: its
        keys are its partition's, so nothing is redistributed)."""
        snapshots = SnapshotStore(self._storage, self._key(savepoint.name, task), generation=0)
        ref = SnapshotRef(savepoint.checkpoint_id, savepoint.tasks[task])
        return snapshots.restore(ref, dest, reuse=False)

    def load_partition(
        self,
        savepoint: Savepoint,
        operators: Iterable[str],
        partition: int,
        partitions: int,
        dest: Path,
        metas: dict[str, dict[str, Any]] | None = None,
    ) -> int:
        """Build the RocksDB state of keyed partition ``partition`` of ``partitions`` in
        ``dest``: the keys of ``operators`` that hash to it, from every saved task. Returns
        the number of keys; ``metas`` gets each saved task's snapshot metadata."""
        wanted = {name.encode() for name in operators}
        loaded = 0
        store = RocksDBStore(dest)
        try:
            for task, owner in sorted(savepoint.tasks.items()):
                snapshots = SnapshotStore(
                    self._storage, self._key(savepoint.name, task), generation=0
                )
                with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
                    local = Path(tmp) / "db"
                    info = snapshots.restore(
                        SnapshotRef(savepoint.checkpoint_id, owner), local, reuse=False
                    )
                    if metas is not None:
                        metas[task] = info.meta
                    loaded += _copy_partition(local, store, wanted, partition, partitions)
        except BaseException:
            store.close()
            shutil.rmtree(dest, ignore_errors=True)
            raise
        store.close()
        return loaded


def inherited_floors(
    savepoint: Savepoint, metas: dict[str, dict[str, Any]], operators: Iterable[str]
) -> list[list[int]]:
    """Lateness floors (`processor.engine.floors`) for a keyed task of a new job whose
    stage holds ``operators``: per saved stage holding any of them, the watermark each of its
    tasks had reached (index: its partition), and the floors those tasks had inherited
    themselves. Empty for a savepoint without watermarks (untimed, or of an older version)."""
    wanted = set(operators)
    layers: list[list[int]] = []
    for stage, names in sorted(savepoint.operators.items()):
        if not wanted & set(names):
            continue
        marks: dict[int, int] = {}
        for task in savepoint.tasks:
            name, _, index = task.rpartition("-")
            if name != stage or not index.isdecimal():
                continue
            meta = metas.get(task, {})
            watermarks = meta.get("watermarks")
            current = watermarks.get("current") if isinstance(watermarks, dict) else None
            marks[int(index)] = int(current) if isinstance(current, int) else NO_WATERMARK
            carried = Floors.from_json(meta.get("floors"))
            for layer in carried.layers if carried is not None else []:
                if layer not in layers:
                    layers.append(layer)
        if marks:
            layers.append([marks.get(i, NO_WATERMARK) for i in range(max(marks) + 1)])
    return [layer for layer in layers if max(layer) > NO_WATERMARK]


def _copy_partition(
    source: Path, target: RocksDBStore, operators: set[bytes], partition: int, partitions: int
) -> int:
    """Keys ``<operator>\\0<key text>`` of ``operators`` whose key text hashes to
    ``partition``, as the shuffle hashes it (CRC-32 of the key text, modulo partitions). An
    operator's timers (``<operator>/timers``, `processor.engine.timers`) and TTL deadlines
    (``<operator>/ttl``, `processor.engine.expiry`) go with it."""
    batch: dict[bytes, bytes | None] = {}
    copied = 0
    with RocksDBStore(source) as saved:
        for key, value in saved.items():
            operator, sep, text = key.partition(b"\0")
            if not sep or operator.partition(b"/")[0] not in operators:
                continue
            if zlib.crc32(text) % partitions != partition:
                continue
            batch[key] = value
            if len(batch) >= _WRITE_BATCH:
                target.write(batch)
                copied += len(batch)
                batch = {}
    target.write(batch)
    return copied + len(batch)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def open_savepoint(settings: Settings) -> tuple[SavepointStore, Savepoint]:
    """The savepoint ``PROCESSOR_FROM_SAVEPOINT`` names: a name in the checkpoint storage, or
    a location of its own (a directory path, or s3://bucket/prefix)."""
    given = settings.from_savepoint
    if given.startswith("s3://") or "/" in given:
        location: Path | S3Location = (
            S3Location.parse(given) if given.startswith("s3://") else Path(given)
        )
        storage = open_storage(settings.model_copy(update={"checkpoint_dir": location}))
        store, name = SavepointStore(storage, prefix=""), ""
    else:
        store, name = SavepointStore(open_storage(settings)), given
    savepoint = store.read(name)
    return store, savepoint if name else Savepoint(**{**savepoint.__dict__, "name": ""})
