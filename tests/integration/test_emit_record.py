"""``emit="record"`` through the engine, each worker SIGKILLed mid-stream and replaced: per key,
the committed updates (read back by a read_committed reader of its own) are every update in
order, none lost, none repeated: a count's are exactly 1, 2, ..., n and a last-value
reduce's are the ``seq`` of the key's records, 1, 2, ..., n, the same as the reference run's."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from processor.plan.stages import plan
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import (
    PipelineRun,
    read_committed,
    updates_per_key,
)

PIPELINE = Path(__file__).resolve().parent / "emit_pipeline.py"
PARTITIONS = 2
KEYS = 40
RECORDS = 4000
NOT_JSON = b'{"k": '


def _partition(key: str) -> int:
    """A key's source partition: its records keep their order up to the aggregation."""
    return int(key[1:]) % PARTITIONS


def test_per_record_updates_are_exact_after_a_kill(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        PIPELINE,
        {"events": "events", "counts": "counts", "lasts": "lasts"},
        source_partitions=PARTITIONS,
        shuffle_partitions="2",
        expected_workers="2",
    )
    assert all(s.combiner is None for s in plan(run.pipeline).stages if not s.is_source)
    rng = random.Random(23)
    seq: dict[str, int] = {}
    placed: list[tuple[bytes, int]] = []
    for i in range(RECORDS):
        key = f"k{rng.randrange(KEYS)}"
        seq[key] = seq.get(key, 0) + 1
        placed.append((json.dumps({"k": key, "seq": seq[key]}).encode(), _partition(key)))
        if i % 1000 == 500:
            placed.append((NOT_JSON, 0))  # dead at the source: the sequences go on
    events = run.topics["events"]
    run.inputs[events].extend(value for value, _ in placed)

    def feed(part: list[tuple[bytes, int]], seconds: float) -> None:
        """``part`` in 10 chunks spread over ``seconds``, the job reading as they come."""
        size = len(part) // 10 + 1
        for i in range(0, len(part), size):
            run.send_placed((events, v, p, None) for v, p in part[i : i + size])
            time.sleep(seconds / 10)

    def kill(index: int) -> None:
        """SIGKILL worker ``index`` right after a part of the feed, while the job works on
        it: what the worker emitted since its last checkpoint is aborted and done again by
        its replacement. Then wait until the job commits again (recovered)."""
        assert " started on " in run.log(f"worker-{index}"), f"worker-{index} runs no task"
        run.kill_worker(index)
        run.start_worker(index)
        run.wait_for_checkpoints(3, timeout=180)

    def done() -> bool:
        """Every record's update committed in both sinks (or more: a repeat, failed below)."""
        return all(
            sum(map(len, read_committed(kafka_bootstrap, run.topics[t]).values())) >= RECORDS
            for t in ("counts", "lasts")
        )

    # A coordinator that stays when the job is idle (between the parts of the feed).
    run.start_coordinator(exit_when_idle=False)
    run.start_worker(0)
    run.start_worker(1)
    try:
        # A first few records until the job runs (it may take seconds to start); then three
        # parts, each spread over seconds while the job checkpoints as it goes, with a kill
        # after the first and after the second.
        third = len(placed) // 3
        feed(placed[:100], 0)
        wait_until(run._sources_committed, 120, "committed positions in every source partition")
        feed(placed[100:third], 3)
        kill(1)
        feed(placed[third : 2 * third], 3)
        kill(0)
        feed(placed[2 * third :], 3)
        wait_until(done, 180, "every update committed")
        run.wait_for_checkpoints(2)  # an extra update would be committed by now
        assert run.completed_checkpoints() >= 8  # every key's updates span many epochs
        expected = run.verify()  # each key's full sequence, as the reference's; the DLQ
        assert [error[:8] for _, error in expected.dead] == ["not JSON"] * 4
        counts = updates_per_key(read_committed(kafka_bootstrap, run.topics["counts"]))
        lasts = updates_per_key(read_committed(kafka_bootstrap, run.topics["lasts"]))
        want = {key.encode(): list(range(1, n + 1)) for key, n in seq.items()}
        assert {k: [int(v) for v in vs] for k, vs in counts.items()} == want
        assert {k: [json.loads(v)["seq"] for v in vs] for k, vs in lasts.items()} == want
    finally:
        run.stop()
