"""Savepoints: taken from a running job, restored into a new job with another number of
shuffle partitions (state redistributed by key); the output goes on exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from processor.commands import corpus
from processor.state.format import STATE_FORMAT
from processor.state.rocksdb.snapshots import seal_manifest
from processor.state.savepoints import MANIFEST_NAME, Savepoint
from processor.state.storage import DirectoryStorage
from tests.integration.harness import JobRun, SuccessorRun
from tests.integration.pipeline_run import PipelineRun, read_committed


def _savepoint(run: JobRun, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", "savepoint", *args],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize(("before", "after"), [(8, 4), (4, 16)])
def test_restore_a_savepoint_with_another_shuffle_partition_count(
    before: int, after: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    first = JobRun(
        kafka_bootstrap, tmp_path / "first", interval_ms=300, shuffle_partitions=str(before)
    )
    second: JobRun | None = None
    try:
        first.produce(line.encode() for line in corpus.lines(60_000, seed=3))
        first.start(workers=2)
        first.wait_idle(180)
        # The job is idle: a savepoint now holds everything it wrote (stop-with-savepoint),
        # so the restored job's output goes on strictly increasing per word.
        first.start_coordinator(exit_when_idle=False)
        taken = _savepoint(first, "--name", f"sp-{first.job}")
        assert taken.returncode == 0, taken.stderr
        assert f"savepoint sp-{first.job}: checkpoint" in taken.stdout
        assert f"sp-{first.job}" in _savepoint(first, "--list").stdout
        first.stop()

        second = SuccessorRun(
            first,
            tmp_path / "second",
            interval_ms=300,
            shuffle_partitions=str(after),
            from_savepoint=f"sp-{first.job}",
        )
        second.produce(line.encode() for line in corpus.lines(40_000, seed=4))
        second.start(workers=2)
        assert second.finish(240) > 0
        assert f"starts from savepoint sp-{first.job}" in second.log("coordinator")
        workers = second.log("worker-0") + second.log("worker-1")
        # Each keyed task loaded its keys (again, if it moved before its first commit).
        for i in range(after):
            assert f"count-{i}: loaded" in workers
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_savepoint_of_a_job_that_never_ran_is_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path)
    taken = _savepoint(run, "--timeout", "5")
    assert taken.returncode == 1
    assert taken.stderr.strip().splitlines() == [
        f"processor: job {run.job} has no {run.job}.checkpoints topic: no coordinator ever ran it"
    ]


def test_state_the_pipeline_dropped_is_refused_in_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path)
    location = tmp_path / "sp"
    saved = Savepoint("", "old", 5, "t", STATE_FORMAT, {}, {}, {"count": ["counts", "gone"]})
    DirectoryStorage(location).put_bytes(MANIFEST_NAME, seal_manifest(saved.to_json()))
    result = subprocess.run(
        [sys.executable, "-m", "processor", "coordinator", "--from-savepoint", str(location)],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"processor: savepoint {str(location)!r} has state of operators the pipeline does not "
        "have: gone (PROCESSOR_ALLOW_DROPPED_STATE=true drops it)"
    ]


WINDOWS = """from processor import Pipeline


def build(events, counts):
    p = Pipeline()
    source = p.source(events, value="json", timestamp=lambda e: e["ts"], idle_ms=120_000)
    by_key = source.key_by(lambda e: e["k"], name="by-key")
    by_key.window(size_ms=1000, name="second").count(name="per-second").sink(counts)
    return p
"""


def test_records_late_before_a_savepoint_stay_late_after_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A window the first job emitted is gone from the savepoint's state: a record for it
    that the second job reads (with another shuffle partition count) is late there too, by the
    watermarks the savepoint carries, instead of opening the window again and emitting
    ``key@start`` a second time with a partial count; also after the second job restarted
    from a checkpoint of its own taken while its watermark was still below them."""
    module = tmp_path / "windows.py"
    module.write_text(WINDOWS)
    topics = {"events": "events", "counts": "counts"}
    first = PipelineRun(kafka_bootstrap, tmp_path / "first", module, topics, shuffle_partitions="4")
    events = first.topics["events"]
    t = (int(time.time() * 1000) // 1000) * 1000 - 600_000
    keys = [f"k{i}" for i in range(20)]

    def send(records: list[tuple[str, int, int]]) -> None:
        """(key, event time, source partition)"""
        first.send_placed(
            (events, json.dumps({"k": k, "ts": ts}).encode(), part, None) for k, ts, part in records
        )

    second: PipelineRun | None = None
    try:
        # Windows t and t+5000 of every key; then every partition passes t+10000, which
        # closes them (and opens tick@t+10000, still open at the savepoint).
        send([(k, ts, i % 2) for i, k in enumerate(keys) for ts in (t + 500, t + 5500)])
        send([("tick", t + 10_000, part) for part in (0, 1)])
        first.start_coordinator()
        first.start_worker(0)
        first.wait_idle(120)
        first.stop()
        taken = _savepoint(first, "--last-completed", "--name", f"sp-{first.job}")
        assert taken.returncode == 0, taken.stderr

        second = PipelineRun(
            kafka_bootstrap,
            tmp_path / "second",
            module,
            topics,
            topic_prefix=first.job,
            shuffle_partitions="3",
            checkpoint_dir=str(tmp_path / "first" / "checkpoints"),
            from_savepoint=f"sp-{first.job}",
        )
        # On time: t+10000, on partition 0 only: partition 1 holds the second job's
        # watermark back, below the inherited floors, which its snapshots must carry on.
        send([(k, t + 10_500, 0) for k in keys])
        second.start_coordinator()
        second.start_worker(0)
        second.wait_idle(120)
        second.stop()
        # Restarted from its own checkpoint: late as in the first job, windows t and t+5000
        # of every key. Then t+20000 everywhere closes t+10000.
        late = [(k, ts, i % 2) for i, k in enumerate(keys) for ts in (t + 700, t + 5700)]
        send(late)
        send([("tick", t + 20_000, part) for part in (0, 1)])
        second.start_coordinator()
        second.start_worker(0)
        second.wait_idle(120)

        windows = [
            (key.decode(), int(value))
            for part in read_committed(kafka_bootstrap, first.topics["counts"]).values()
            for key, value, _ in part
            if key is not None and value is not None
        ]
        twice = sorted(k for k, n in Counter(k for k, _ in windows).items() if n > 1)
        assert not twice, f"windows emitted twice: {twice[:5]}"
        want = {f"{k}@{start}": 1 for k in keys for start in (t, t + 5000, t + 10_000)}
        # The tick window was open at the savepoint: its state went on in the second job.
        assert dict(windows) == {**want, f"tick@{t + 10_000}": 2}
        got_late = read_committed(kafka_bootstrap, f"{second.job}.late")
        assert sum(len(part) for part in got_late.values()) == len(late)
        assert "loaded" in second.log("worker-0")
    finally:
        first.stop()
        if second is not None:
            second.stop()
