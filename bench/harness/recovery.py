"""Recovery time after SIGKILL of a worker, measured on the real broker.

Recovery = from the kill to the first committed checkpoint of *every* task that ran on the
killed worker (read from the acknowledgements on the control topic, by Kafka timestamp).

Two cases:
  restart   the worker is started again at once (a supervisor: `processor local`, Kubernetes)
  failover  the worker stays dead; its tasks move after the heartbeat timeout

    python bench/recovery.py [--bootstrap 127.0.0.1:9092] [--words 3000000] [--kills 3]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness.measure import OutputWatcher, create_topic, exact_counts, rates
from bench.peers.processor_peer import completed_checkpoints
from processor.commands import corpus
from tests.integration.harness import JobRun, control_messages, recovery_times


def measure(bootstrap: str, words: int, kills: int, restart: bool) -> list[float]:
    """Seconds from each kill to the first committed checkpoint of every task it ran."""
    times: list[float] = measure_run(bootstrap, words, kills, restart)["times"]
    return times


def measure_run(
    bootstrap: str, words: int, kills: int, restart: bool, feed_s: float = 40.0
) -> dict[str, Any]:
    """``measure``, plus what bench/run.py plots: the committed output over time (a
    read_committed reader tailing the output, words/s per 0.5 s), the kills and the completed
    checkpoints, in seconds since the job started."""
    tmp = tempfile.mkdtemp(prefix="recovery-")  # kept: the processes' logs are there
    print(f"logs in {tmp}", file=sys.stderr, flush=True)
    run = JobRun(bootstrap, Path(tmp), interval_ms=1000)
    text = list(corpus.lines(words, seed=5))
    lines = [line.encode() for line in text]
    chunks = max(1, int(feed_s / 0.2))
    step = len(lines) // chunks + 1
    # The coordinator would create the output with one partition per keyed task; created here
    # the same way, so that the watcher can follow it from the start.
    create_topic(bootstrap, run.settings.output_topic, run.settings.shuffle_partitions)
    watcher = OutputWatcher(bootstrap, run.settings.output_topic, dict(exact_counts(text)))
    del text

    def feed() -> None:
        # Spread over ``feed_s``, so that every kill lands in a busy stream.
        for i in range(0, len(lines), step):
            run.produce(lines[i : i + step])
            time.sleep(0.2)

    feeding = threading.Thread(target=feed, daemon=True)
    kill_times: list[float] = []
    watcher.start()
    started = time.time()
    try:
        run.start_coordinator(exit_when_idle=True)
        run.start_worker(0)
        run.start_worker(1)
        feeding.start()
        run.wait_for_checkpoints(2)
        for _ in range(kills):
            kill_times.append(time.time())
            run.kill_worker(0)
            if restart:
                run.start_worker(0)
                run.wait_for_checkpoints(2)
            else:
                run.wait_for_checkpoints(2)
                run.start_worker(0)
                run.wait_for_checkpoints(2)
        feeding.join()
        run.wait_idle(600)
        run.verify_exactly_once()
        messages = control_messages(run)
        checkpoints = completed_checkpoints(bootstrap, run.job)
    finally:
        run.stop()
        watcher.close()
    results = recovery_times(messages, [(k, "worker-0") for k in kill_times])
    assert len(results) == len(kill_times), "a killed worker's tasks never committed again"
    return {
        "times": results,
        "timeline": {
            "rates": rates(watcher.progress, started),
            "kills": [round(k - started, 3) for k in kill_times],
            "checkpoints_completed": [
                round(float(c["completed_at"]) - started, 3) for c in checkpoints
            ],
        },
    }
