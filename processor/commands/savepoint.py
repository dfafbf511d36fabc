"""``processor savepoint``: take, list and delete savepoints of a running job.

Taking one waits for the next checkpoint the job completes after the command started (an
aligned checkpoint, like any other), then copies it out of the job's reach
(`state/savepoints.py`). The job's retention may delete that checkpoint's files while the
copy runs; the copy is verified file by file, and on a missing file it starts again from the
checkpoint completed next. ``--last-completed`` copies the job's last completed checkpoint at
once instead, for a job that cannot run any more (its source topics gained partitions, see
`processor.worker.layout`): its snapshots are there while no task has committed
``PROCESSOR_RETAINED_CHECKPOINTS`` later ones (retention deletes them then).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from processor.config import Settings
from processor.jobs import load_graph
from processor.jobs.graph import JobGraph, TaskId
from processor.kafka import clients
from processor.models import internal
from processor.state.factory import open_storage
from processor.state.format import STATE_FORMAT
from processor.state.savepoints import (
    Savepoint,
    SavepointError,
    SavepointStore,
    check_name,
    now_iso,
)
from processor.state.storage import CheckpointStorage, SnapshotMissing

_ATTEMPTS = 5


def take(
    settings: Settings, name: str, timeout_s: float, last_completed: bool = False
) -> Savepoint:
    if settings.guarantee != "exactly_once":
        # A snapshot of an unaligned task holds records past its barriers: no consistent cut.
        raise SavepointError("savepoints need PROCESSOR_GUARANTEE=exactly_once")
    if settings.checkpoint_alignment != "aligned":
        # Its cut holds records still in the shuffle logs, which a new job does not have.
        raise SavepointError("savepoints need PROCESSOR_CHECKPOINT_ALIGNMENT=aligned")
    graph = load_graph(settings)
    storage = open_storage(settings)
    store = SavepointStore(storage)
    if store.exists(name):
        raise SavepointError(f"savepoint {name!r} exists already")
    checkpoints = _Checkpoints(settings)
    try:
        after = checkpoints.newest_id()
        if last_completed:
            return _copy_last(settings, graph, name, store, storage, checkpoints.newest)
        deadline = time.monotonic() + timeout_s
        problem = ""
        for _ in range(_ATTEMPTS):
            record = checkpoints.wait_newer(after, deadline)
            if record is None:
                raise SavepointError(
                    f"job {settings.job_name} completed no checkpoint within {timeout_s:.0f}s "
                    f"after checkpoint {after}: is it running?{problem}"
                )
            savepoint = savepoint_of(record, graph, name)
            with tempfile.TemporaryDirectory(prefix="processor-savepoint-") as tmp:
                try:
                    store.save(savepoint, storage, settings.job_name, Path(tmp))
                    return savepoint
                except SnapshotMissing as exc:
                    # Retention overtook the copy: the next completed checkpoint is as good.
                    after = savepoint.checkpoint_id
                    problem = f" (last attempt: {exc})"
        raise SavepointError(f"could not copy a checkpoint in {_ATTEMPTS} attempts{problem}")
    finally:
        checkpoints.close()


def _copy_last(
    settings: Settings,
    graph: JobGraph,
    name: str,
    store: SavepointStore,
    storage: CheckpointStorage,
    record: dict[str, Any] | None,
) -> Savepoint:
    if record is None:
        raise SavepointError(f"job {settings.job_name} has completed no checkpoint")
    savepoint = savepoint_of(record, graph, name)
    with tempfile.TemporaryDirectory(prefix="processor-savepoint-") as tmp:
        try:
            store.save(savepoint, storage, settings.job_name, Path(tmp))
        except SnapshotMissing as exc:
            raise SavepointError(
                f"checkpoint {savepoint.checkpoint_id} cannot be copied any more ({exc})"
            ) from None
    return savepoint


def savepoint_of(record: dict[str, Any], graph: JobGraph, name: str) -> Savepoint:
    """What completed checkpoint ``record`` (as the coordinator stores it) saves."""
    if graph.plan.loops:
        raise SavepointError(
            f"job {graph.job_name} has a loop: a savepoint would not hold the records in "
            "flight round it (docs/loops.md)"
        )
    checkpoint_id = int(record["id"])
    sources: dict[str, dict[int, int]] = {}
    tasks: dict[str, str] = {}
    for task, info in sorted(record.get("tasks", {}).items()):
        stage = graph.stage(TaskId.parse(task).stage)
        if stage.source is not None:
            positions = sources.setdefault(stage.source.topic, {})
            positions.update({int(p): int(o) for p, o in info.get("positions", {}).items()})
        if stage.source is None or stage.keyed_source is not None:  # a snapshot: saved
            owner = info.get("owner")
            if not owner:
                raise SavepointError(
                    f"checkpoint {checkpoint_id} does not name the snapshot of {task} "
                    "(recorded by an older version): take the savepoint again"
                )
            tasks[task] = str(owner)
    operators = {s.name: [n.name for n in s.stateful] for s in graph.stages if s.stateful}
    return Savepoint(
        name=name,
        job=graph.job_name,
        checkpoint_id=checkpoint_id,
        created_at=now_iso(),
        state_format=STATE_FORMAT,
        sources=sources,
        tasks=tasks,
        operators=operators,
    )


class _Checkpoints:
    """The job's completed checkpoints, as the coordinator records them."""

    def __init__(self, settings: Settings) -> None:
        self._topic = settings.checkpoints_topic
        self._consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.cli"})
        if clients.topic_partitions(self._consumer, self._topic) is None:
            self._consumer.close()
            raise SavepointError(
                f"job {settings.job_name} has no {self._topic} topic: no coordinator ever ran it"
            )
        self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        self.newest: dict[str, Any] | None = None  # the newest completed checkpoint read

    def newest_id(self) -> int:
        _, high = clients.watermark_offsets(self._consumer, TopicPartition(self._topic, 0))
        position = 0
        deadline = time.monotonic() + 30
        while position < high and time.monotonic() < deadline:
            for msg in self._consumer.consume(1000, 0.5):
                self._take(msg.value() if msg.error() is None else None)
                position = max(position, (msg.offset() or 0) + 1)
        return int(self.newest["id"]) if self.newest else 0

    def wait_newer(self, after: int, deadline: float) -> dict[str, Any] | None:
        while time.monotonic() < deadline:
            if self.newest is not None and int(self.newest["id"]) > after:
                return self.newest
            for msg in self._consumer.consume(100, 0.5):
                self._take(msg.value() if msg.error() is None else None)
        return None

    def _take(self, value: bytes | None) -> None:
        if not value:
            return
        record = internal.checkpoint_record(value)
        if record is None:
            return  # not a completed checkpoint (the coordinator skips and counts these)
        if self.newest is None or int(record["id"]) > int(self.newest["id"]):
            self.newest = record

    def close(self) -> None:
        self._consumer.close()


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="default: <job>-<UTC date and time>")
    parser.add_argument("--list", action="store_true", help="list the job's savepoints")
    parser.add_argument(
        "--all-jobs", action="store_true", help="with --list: every job's savepoints in the storage"
    )
    parser.add_argument("--delete", metavar="NAME", help="delete one of the job's savepoints")
    parser.add_argument(
        "--force", action="store_true", help="with --delete: also another job's, or a corrupt one"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait")
    parser.add_argument(
        "--last-completed",
        action="store_true",
        help="copy the last completed checkpoint now rather than wait for the next one "
        "(a job that is stopped)",
    )


def run(args: argparse.Namespace) -> int:
    """``processor savepoint``: take one (the default), ``--list`` or ``--delete``."""
    from processor.commands import base

    settings = base.setup(args)
    try:
        if args.list:
            list_savepoints(settings, args.all_jobs)
            return 0
        if args.delete:
            job = None if args.force else settings.job_name
            SavepointStore(open_storage(settings)).delete(args.delete, job)
            print(f"deleted savepoint {args.delete}")
            return 0
        name = args.name or f"{settings.job_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        check_name(name)
        taken = take(settings, name, args.timeout, args.last_completed)
    except SavepointError as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 1
    print(
        f"savepoint {taken.name}: checkpoint {taken.checkpoint_id} of job {taken.job}, "
        f"{len(taken.tasks)} keyed tasks (start a job from it with --from-savepoint {taken.name})"
    )
    return 0


def list_savepoints(settings: Settings, all_jobs: bool) -> None:
    """The job's savepoints (``all_jobs``: every job's in the storage), one a line."""
    store = SavepointStore(open_storage(settings))
    for name in store.names():
        try:
            sp = store.read(name)
        except SavepointError as exc:
            print(f"{name}  unreadable: {exc}")
            continue
        if all_jobs or sp.job == settings.job_name:
            print(f"{name}  job {sp.job}, checkpoint {sp.checkpoint_id}, {sp.created_at}")
