"""A fallback restore replays the epochs between an older snapshot and the committed checkpoint
quietly: the operators after an aggregation in the same stage must get its updates too, in the
order the first run gave them, early flushes included. Here a count feeds a first-sight
``process`` and a running ``reduce``; each keyed task's committed snapshot is lost and its
worker SIGKILLed. Every word fires once, and each of the reduce's updates is the one before
plus the count update that produced it (a reduce set back to the older snapshot is not)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from processor.pipeline.plan import plan
from tests.integration.after_count_pipeline import threshold
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed, updates_per_key

PIPELINE = Path(__file__).resolve().parent / "after_count_pipeline.py"
WORDS = 40_000


def _lose_committed_snapshots(run: PipelineRun, stage: str) -> None:
    """The manifest of each keyed task's committed snapshot, removed: the next start must fall
    back to an older one."""
    for partition in range(2):
        manifest = run.committed_manifest(stage, partition)
        assert manifest is not None, f"{stage}-{partition} committed nothing"
        manifest.unlink()


def test_a_fallback_rebuilds_the_operators_after_a_count(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        PIPELINE,
        {"words": "words", "counts": "counts", "firsts": "firsts", "sums": "sums"},
        shuffle_partitions="2",
        expected_workers="2",
        interval_ms=300,
        flush_keys="40",  # early flushes within every epoch: the replay must find them again
    )
    stage = plan(run.pipeline).stages[1].name
    rng = random.Random(40)
    words = [f"w{rng.randrange(200)}".encode() for _ in range(WORDS)]
    try:
        run.start(workers=2)
        run.feed_topic("words", words, seconds=16)
        wait_until(run.halfway.is_set, 120, "half of the feed")
        run.resume_feed()
        # Mid-stream: the epochs the fallback replays carry words.
        run.wait_for_checkpoints(4, timeout=180)
        for i in range(2):
            run.kill_worker(i)
        _lose_committed_snapshots(run, stage)
        for i in range(2):
            run.start_worker(i)
        run.drain(timeout=300)
        logs = run.log("worker-0") + run.log("worker-1")
        for partition in range(2):
            assert f"{stage}-{partition}: falling back to checkpoint" in logs
            assert f"{stage}-{partition}: replay after the fallback is done" in logs
        _check(run, Counter(w.decode() for w in words))
    finally:
        run.stop()


def _check(run: PipelineRun, total: Counter[str]) -> None:
    def updates(param: str) -> dict[str, list[int]]:
        got = updates_per_key(read_committed(run.bootstrap, run.topics[param]))
        return {(k or b"").decode(): [int(v) for v in vs] for k, vs in got.items()}

    counts, sums, firsts = updates("counts"), updates("sums"), updates("firsts")
    assert {w: c[-1] for w, c in counts.items()} == dict(total)
    for word, changes in counts.items():
        running, expected = 0, []
        for count in changes:
            running += count
            expected.append(running)
        assert sums[word] == expected, f"{word}: the reduce went astray after the fallback"
    fired = {w: [threshold(w)] for w, n in total.items() if n >= threshold(w)}
    assert firsts == fired, "a first sight fired twice, or never"
