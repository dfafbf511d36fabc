"""`Pipeline.keyed_source`: the plan keeps its keyed operators in the source's stage, the
chain keys its records by their Kafka keys in each form its operators take, and what it
cannot run yet is refused in one line. (The task, against Kafka, with a worker killed:
tests/integration/test_keyed_source.py.)"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

import pytest

from processor import Pipeline
from processor.errors import PipelineError
from processor.models.murmur2 import partition_of
from processor.models.partitioners import Placement
from processor.plan.stages import plan
from processor.state.rocksdb.snapshots import SnapshotRef
from processor.state.storage import SnapshotMissing
from processor.testing import run
from processor.worker.keyed_restore import ShuffleInput, restore_snapshot
from processor.worker.keyed_source import NO_FALLBACK
from processor.worker.task import Triggers


def test_its_keyed_operators_run_in_the_source_stage_with_no_shuffle() -> None:
    p = Pipeline()
    counts = p.keyed_source("clicks").count()
    counts.sink("per_user")
    counts.key_by(lambda n: n % 2).count().sink("parity")
    first, second = plan(p).stages
    assert first.is_source and first.keyed_source is not None
    assert [n.kind for n in first.nodes] == ["key_by", "count", "sink", "key_by"]
    assert [n.name for n in first.shuffles] == [second.head.name]  # only the one after it
    assert not second.is_source


def test_it_counts_per_kafka_key() -> None:
    p = Pipeline()
    p.keyed_source("clicks", key="json").count().sink("per_user")
    out = run(p, {"clicks": [(b"1", "a"), (b'"1"', "b"), (b"1", "c")]})
    assert sorted(out["per_user"]) == [("1", 1), ("1", 2)]  # 1 and "1" stay two keys


def test_a_window_after_it_gets_the_event_time() -> None:
    p = Pipeline()
    s = p.keyed_source("bids", timestamp=lambda v: int(v))
    s.window(size_ms=10).count().sink("per_window")
    out = run(p, {"bids": [("a", "1"), ("a", "5"), ("b", "7"), ("a", "12")]})
    assert sorted(out["per_window"]) == [("a@0", 2), ("a@10", 1), ("b@0", 1)]


def test_a_process_after_it_gets_the_headers_and_timers() -> None:
    def track(value: Any, state: Any) -> list[Any]:
        seen = state.get(0) + 1
        state.set(seen)
        state.timers.set(state.timestamp + 100)
        return [(seen, dict(state.headers).get("app"))]

    def fired(at: int, state: Any) -> list[Any]:
        return [("done", state.get(0), at)]

    p = Pipeline()
    p.keyed_source("events", timestamp=lambda v: v["ts"], value="json").process(
        track, on_timer=fired
    ).sink("out")
    events = [("u", {"ts": 1}), ("u", {"ts": 50}), ("v", {"ts": 60})]
    out = run(p, {"events": events})["out"]
    assert out[:3] == [("u", [1, None]), ("u", [2, None]), ("v", [1, None])]
    done = [("u", ["done", 2, 101]), ("u", ["done", 2, 150]), ("v", ["done", 1, 160])]
    assert sorted(out[3:]) == done  # every timer fires: none was deleted


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda p: p.keyed_source("t", key=None), "needs its format"),
        (lambda p: p.keyed_source("t", key="bytes"), "needs its format"),
        (lambda p: p.keyed_source("t", partitioner="fnv"), "partitioner='fnv'"),
        (
            lambda p: p.keyed_source("t").join(p.source("u").key_by(str), 10).sink("o"),
            "join",
        ),
        (lambda p: p.keyed_source("t").merge(p.source("u").key_by(str)).sink("o"), "merge"),
    ],
)
def test_what_it_cannot_run_is_refused_in_one_line(build: Any, says: str) -> None:
    p = Pipeline()
    with pytest.raises(PipelineError, match=says):
        build(p)
        if not p.sinks:  # the pipeline needs a sink to be planned
            p.keyed_source("v").sink("o")
        plan(p)


def test_placement_is_the_producers_partitioners() -> None:
    for key in (b"", b"u1", b"a longer key of the carts"):
        assert Placement("murmur2", 7).of(key) == partition_of(key, 7)
        assert Placement("crc32", 7).of(key) == zlib.crc32(key) % 7
    assert Placement("murmur2", 3).of(None) is None
    small = Placement("crc32", 5, cache=2)
    assert [small.of(k) for k in (b"a", b"b", b"c", b"a")] == [
        zlib.crc32(k) % 5 for k in (b"a", b"b", b"c", b"a")
    ]


def test_a_source_task_acts_on_the_newest_trigger_and_a_drain_is_for_good() -> None:
    triggers = Triggers()
    triggers.offer(3, 30.0, drain=False)
    triggers.offer(2, 20.0, drain=True)  # superseded, but its drain stays
    assert (triggers.requested, triggers.requested_at, triggers.draining) == (3, 30.0, True)
    triggers.offer(4, 40.0, drain=False)
    assert (triggers.requested, triggers.requested_at, triggers.draining) == (4, 40.0, True)


class _LostSnapshots:
    """Snapshot storage whose committed snapshot is gone and an older one is there."""

    def __init__(self) -> None:
        self.tried: list[int] = []

    def restore(self, ref: SnapshotRef, _dest: Path, reuse: bool = True) -> Any:
        self.tried.append(ref.checkpoint_id)
        raise SnapshotMissing(f"checkpoint {ref.checkpoint_id} is gone")

    def snapshots(self) -> list[SnapshotRef]:
        return [SnapshotRef(3, "old"), SnapshotRef(5, "new")]


@pytest.mark.parametrize(
    "reason",
    [NO_FALLBACK, "unaligned checkpoints do not fall back"],
)
def test_a_lost_snapshot_with_no_fallback_stops_the_task_with_why(
    reason: str, tmp_path: Path
) -> None:
    """A keyed source (or unaligned) task tries no older snapshot: its input has no barriers
    to replay up to the committed one."""
    snapshots = _LostSnapshots()
    shuffle = ShuffleInput("t-0", "topic", 0, 1)
    with pytest.raises(SnapshotMissing, match=re.escape(reason)):
        restore_snapshot(snapshots, shuffle, SnapshotRef(5, "new"), tmp_path, 0, reason)  # type: ignore[arg-type]
    assert snapshots.tried == [5]
    with pytest.raises(SnapshotMissing, match="no older snapshot"):  # with a fallback: tried
        restore_snapshot(snapshots, shuffle, SnapshotRef(5, "new"), tmp_path, 0, None)  # type: ignore[arg-type]
    assert snapshots.tried == [5, 5, 3]
