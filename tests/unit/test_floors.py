"""Lateness floors: a job started from a savepoint keeps every record late that the old job
made late, per key by the watermark of the old task that owned the key, with any partition
count; the floors last until the new job's own watermark passes them."""

from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from processor import Pipeline
from processor.engine.chain import StageChain
from processor.engine.floors import Floors
from processor.engine.time import NO_WATERMARK
from processor.plan.stages import Plan, Stage, plan
from processor.state.rocksdb.snapshots import SnapshotStore
from processor.state.rocksdb.store import RocksDBStore
from processor.state.savepoints import Savepoint, SavepointStore, inherited_floors
from processor.state.storage import DirectoryStorage
from tests.unit.test_chain import DictBackend

LATE = "job.late"
KEYS = [f"key{i}" for i in range(40)]
# The old job's two tasks had reached different watermarks at the savepoint's checkpoint
# (e.g. an idle channel came back on one partition earlier than on the other).
OLD_WATERMARKS = [5000, 2000]


def _window_plan() -> tuple[Plan, Stage]:
    p = Pipeline()
    source = p.source("in", value="json", timestamp=lambda v: v["ts"])
    keyed = source.key_by(lambda v: v["k"], name="k")
    keyed.window(size_ms=1000).count(name="per-second").sink("out")
    compiled = plan(p)
    return compiled, compiled.stage("k")


def _owner(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def _run(chain: StageChain, keys: list[str], times: list[int], watermark: int) -> list[Any]:
    """Records for ``keys`` at ``times``, then the watermark; the sink and late records."""
    chain.shuffled([[k, {"k": k}, ts] for k in keys for ts in times])
    chain.advance(watermark)
    chain.flush()
    return [(k, v) for records in chain.take_sinks().values() for k, v in records]


def _decode(records: list[Any]) -> list[tuple[str, int]]:
    return [(k.decode(), int(v)) for k, v in records]


def test_records_late_in_the_old_job_stay_late_after_a_savepoint_with_another_partition_count(
    tmp_path: Path,
) -> None:
    compiled, stage = _window_plan()
    storage = DirectoryStorage(tmp_path / "storage")
    owners, emitted = {}, []
    for i, watermark in enumerate(OLD_WATERMARKS):
        db = RocksDBStore(tmp_path / f"old-{i}" / "db")
        chain = StageChain(compiled, stage, i, db, {}, late_topic=LATE)
        mine = [k for k in KEYS if _owner(k, 2) == i]
        # Windows [1000, 2000), [4000, 5000) and [6000, 7000): the old task closed those
        # below its watermark and emitted them; the others are open in its state.
        emitted += _decode(_run(chain, mine, [1500, 4500, 6500], watermark))
        db.checkpoint(tmp_path / f"old-{i}" / "chk")
        db.close()
        meta = {"watermarks": {"channels": [watermark], "idle": [False], "current": watermark}}
        snapshots = SnapshotStore(storage, f"old/k-{i}", generation=1)
        owners[f"k-{i}"] = snapshots.upload(7, tmp_path / f"old-{i}" / "chk", meta).ref.owner
    savepoint = Savepoint("sp", "old", 7, "t", "pipeline-1", {}, owners, {"k": ["per-second"]})
    store = SavepointStore(storage)
    store.save(savepoint, storage, "old", tmp_path / "work")
    saved = store.read("sp")

    # The new job has 3 partitions. Each of its tasks loads its keys and, as floors, the
    # watermark of each key's old task; then the records come again (late ones among them).
    late = 0
    for p in range(3):
        dest = tmp_path / f"new-{p}" / "db"
        dest.parent.mkdir()
        metas: dict[str, dict[str, Any]] = {}
        store.load_partition(saved, ["per-second"], p, 3, dest, metas)
        db = RocksDBStore(dest)
        chain = StageChain(compiled, stage, p, db, {}, late_topic=LATE)
        for prefix in chain.timed_operators():  # what KeyedTask._restore_time does
            chain.restore_timers(prefix, db.items(prefix))
        chain.inherit(Floors.from_json(inherited_floors(saved, metas, ["per-second"])))
        assert chain.floors is not None and chain.floors.highest == 5000
        mine = [k for k in KEYS if _owner(k, 3) == p]
        out = _run(chain, mine, [1500, 4500, 6500], 20_000)
        late += sum(1 for k, _ in out if k is not None and b"@" not in k)
        emitted += _decode([(k, v) for k, v in out if k is not None and b"@" in k])
        assert chain.floors is None  # the watermark passed them: dropped
        db.close()

    first = [k for k in KEYS if _owner(k, 2) == 0]  # its old task's watermark: 5000
    # Late in the old job: every record at 1500, and at 4500 those of the first task's keys.
    assert late == len(KEYS) + len(first)
    windows = Counter(key for key, _ in emitted)
    assert set(windows.values()) == {1}, "a window emitted twice"
    expected = {}
    for k in KEYS:
        expected[f"{k}@1000"] = 1
        expected[f"{k}@4000"] = 1 if k in first else 2  # open in the second task: counted on
        expected[f"{k}@6000"] = 2
    assert dict(emitted) == expected


def test_a_join_and_sessions_use_the_floor_until_the_watermark_passes_it() -> None:
    p = Pipeline()
    left = p.source("l", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    right = p.source("r", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    left.join(right, within_ms=100, name="j").sink("pairs")
    by = p.source("s", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    by.window(gap_ms=100).count(name="sessions").sink("out")
    compiled = plan(p)
    floors = Floors([[1000, 3000]])  # by the old partition of 2 of the key's text
    low, high = (next(k for k in KEYS if _owner(k, 2) == i) for i in (0, 1))

    join = StageChain(compiled, compiled.stage("j"), 0, DictBackend(), {}, late_topic=LATE)
    join.inherit(floors)
    join.shuffled([[low, "a", 2000], [high, "b", 2000]], side=0)
    join.shuffled([[low, "c", 2050], [high, "d", 3050]], side=1)
    join.flush()
    sinks = join.take_sinks()
    assert [k for k, _ in sinks[LATE]] == [high.encode()]  # 2000 < its floor 3000
    assert [(k, v) for k, v in sinks["pairs"]] == [(low.encode(), b'["a","c"]')]
    join.advance(3000)
    assert join.floors is None  # passed

    sessions = StageChain(
        compiled, compiled.stage("s.key_by"), 0, DictBackend(), {}, late_topic=LATE
    )
    sessions.inherit(floors)
    sessions.shuffled([[low, {}, 1500], [high, {}, 1500], [high, {}, 2950]])
    sessions.advance(1200)
    assert sessions.floors is not None  # 1200 is below the highest floor
    sessions.flush()
    late = sessions.take_sinks()[LATE]
    assert [k for k, _ in late] == [high.encode()]  # its session [1500, 1600) closed at 3000
    # A chain whose watermark is past every floor already takes none.
    sessions.advance(3000)
    sessions.inherit(floors)
    assert sessions.floors is None


def test_floors_of_a_job_started_from_a_savepoint_carry_on_into_its_own_savepoints() -> None:
    """A savepoint of the new job taken before its watermark passed the inherited floors:
    its tasks' own watermarks are lower than some keys' floors, so the floors go along."""
    savepoint = Savepoint(
        "sp2", "new", 9, "t", "pipeline-1", {}, {"k-0": "o", "k-1": "o", "x-0": "o"},
        {"k": ["per-second"], "x": ["other"]},
    )  # fmt: skip
    inherited = [5000, 2000]
    metas: dict[str, dict[str, Any]] = {
        "k-0": {"watermarks": {"current": 2500}, "floors": [inherited]},
        "k-1": {"watermarks": {"current": 6000}},  # passed them, dropped them
        "x-0": {"watermarks": {"current": 99_999}},  # another stage's operators
    }
    layers = inherited_floors(savepoint, metas, ["per-second"])
    assert layers == [inherited, [2500, 6000]]
    floors = Floors.from_json(layers)
    assert floors is not None and floors.highest == 6000
    for key in KEYS:
        assert floors.of(key) == max(inherited[_owner(key, 2)], [2500, 6000][_owner(key, 2)])
    assert Floors.from_json(floors.to_json()) is not None
    # Untimed or older savepoints: nothing to inherit.
    assert inherited_floors(savepoint, {}, ["per-second"]) == []
    assert Floors.from_json([]) is None and Floors.from_json("x") is None
    assert Floors.from_json([[NO_WATERMARK]]) is None
