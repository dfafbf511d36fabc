"""A source's early write of epoch n+1 (its buffers past ``flush_keys`` after it committed
checkpoint n) opens transaction n+1 in every shuffle partition it writes, and a read_committed
keyed task reads no further than the first record of that open transaction (the partition's
last stable offset). Another source's barrier n written after it would be out of the keyed
task's sight until transaction n+1 commits, at trigger n+1; and with one checkpoint at a time
(PROCESSOR_MAX_CONCURRENT_CHECKPOINTS=1) the coordinator sends trigger n+1 only once
checkpoint n has completed or timed out: the whole stage would wait for the checkpoint
timeout. So a source writes early only once checkpoint n has completed (the coordinator's
``Completed`` message; `SourceTask._may_write_early`).

Here: worker-1 (the source of partition 1 and a keyed task) is stopped while checkpoint n is
triggered, worker-0's source commits n and reads the records sent meanwhile, past
``flush_keys``; worker-1 resumes, its source writes barrier n. Checkpoint n completes within
a second or two, not at the timeout (20 s): no checkpoint times out. Without the wait for
``Completed`` it fails 3 runs of 3 (checkpoint n "timed out waiting for" both keyed tasks)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.integration.pipeline_run import PipelineRun

PIPELINE = Path(__file__).resolve().parent / "after_count_pipeline.py"


def test_a_sources_early_write_does_not_hide_another_sources_barrier(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        PIPELINE,
        {name: name for name in ["words", "counts", "firsts", "sums"]},
        shuffle_partitions="2",
        expected_workers="2",
        interval_ms=300,
        flush_keys="20",
        checkpoint_timeout_ms="20000",
        worker_timeout_ms="60000",  # a worker stopped for seconds keeps its tasks
    )
    topic = run.topics["words"]
    try:
        run.start_coordinator(exit_when_idle=False)
        for worker in range(2):
            run.start_worker(worker)
        run.wait_for_checkpoints(3, timeout=120)
        for _ in range(3):
            run.kill_worker(1, signal.SIGSTOP)
            time.sleep(1)  # trigger n: worker-0's source commits n, n waits for worker-1
            # Partition 0 only: worker-0's source, past flush_keys, writes epoch n+1 early.
            run.send_placed((topic, f"w{i % 200}".encode(), 0, None) for i in range(2000))
            time.sleep(1)
            run.kill_worker(1, signal.SIGCONT)
            run.wait_for_checkpoints(2, timeout=60)
        # A hidden barrier holds its checkpoint until the timeout (20 s) fails it.
        timed_out = [
            line for line in run.log("coordinator").splitlines() if "timed out waiting" in line
        ]
        assert not timed_out, f"a barrier was out of sight: {timed_out}"
    finally:
        for proc in run.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        run.stop()
