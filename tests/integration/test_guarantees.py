"""The modes beside aligned exactly-once, under killed workers.

PROCESSOR_GUARANTEE=at_least_once (no alignment, no transactions): nothing is lost, and only
what was processed again after a failure counts twice. PROCESSOR_CHECKPOINT_ALIGNMENT=unaligned:
exact, as aligned."""

from __future__ import annotations

from pathlib import Path

from processor.commands.counts import read_updates
from tests.integration.harness import JobRun

WORDS = 400_000


def _feed_and_kill_each_worker(run: JobRun) -> None:
    """Two workers; input over 8 s; each worker SIGKILLed once mid-stream and restarted."""
    run.start(workers=2)
    run.feed(WORDS, seconds=8)
    for worker in (0, 1):
        run.wait_for_checkpoints(3)
        run.kill_worker(worker)
        run.start_worker(worker)


def test_at_least_once_loses_nothing_when_workers_are_killed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300, guarantee="at_least_once")
    try:
        _feed_and_kill_each_worker(run)
        run.drain()
        final, _ = read_updates(run.settings, run.settings.output_topic, timeout=60)
        assert final.keys() == run.expected.keys()
        low = {w: (final[w], n) for w, n in run.expected.items() if final[w] < n}
        assert not low, f"counts below the exact one (lost input): {list(low.items())[:5]}"
        assert "processor.worker.keyed" in run.log("worker-0") + run.log("worker-1")
    finally:
        run.stop()


def test_at_least_once_without_failures_is_exact(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300, guarantee="at_least_once")
    try:
        run.start(workers=2)
        run.feed(100_000, seconds=3)
        assert run.finish() >= len(run.expected)
    finally:
        run.stop()


def test_unaligned_checkpoints_stay_exact_when_workers_are_killed(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300, checkpoint_alignment="unaligned")
    try:
        _feed_and_kill_each_worker(run)
        assert run.finish() >= len(run.expected)  # per word strictly increasing, last exact
        logs = run.log("worker-0") + run.log("worker-1")
        assert "restored checkpoint" in logs, "no keyed task restored: the kills came too early"
    finally:
        run.stop()
