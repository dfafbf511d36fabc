"""State TTL through the engine, in event time, each worker SIGKILLed mid-stream and
replaced: per key, the committed updates of a running count with a TTL (1 again after the
key expired) and of a first sight (the records that found no state), read back
read_committed, are exactly those `processor.testing.run` gives on the same input. Keys
expire and come back: a worker that lost its deadlines on a restore would keep them.

The input is in phases far apart in event time (the TTL is much shorter than the jump
between phases and much longer than a phase). A phase starts with keys of its own only, so
that the watermark is in the phase before the keys of the shared pool come back (the
engine's watermark lags its records by a checkpoint or two): then every pool key has
expired when it comes back, wherever the watermarks fall, and never within a phase."""

from __future__ import annotations

import json
import random
import time
import zlib
from pathlib import Path

from processor.testing import run
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed, updates_per_key
from tests.integration.ttl_pipeline import TTL_MS, build

PIPELINE = Path(__file__).resolve().parent / "ttl_pipeline.py"
PARTITIONS = 2
PHASES = 4
PHASE_MS = 10_000_000  # between the starts of phases: far more than the TTL
STEP_MS = 10  # between records: a phase spans 20,000 ms, far less than the TTL
OWN = 1_500  # records of the phase's own keys first ...
POOL = 500  # ... then of the pool's, which come back every phase


def _partition(key: str) -> int:
    """A key's source partition: its records keep their order up to the operators."""
    return zlib.crc32(key.encode()) % PARTITIONS


def _events(seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    events: list[dict[str, object]] = []
    for phase in range(PHASES):
        start = phase * PHASE_MS
        for i in range(OWN + POOL):
            key = f"p{phase}-{rng.randrange(30)}" if i < OWN else f"pool{rng.randrange(10)}"
            events.append({"k": key, "ts": start + i * STEP_MS})
    assert (OWN + POOL) * STEP_MS < TTL_MS < PHASE_MS - (OWN + POOL) * STEP_MS
    return events


def test_keys_expire_and_come_back_alike_after_kills(kafka_bootstrap: str, tmp_path: Path) -> None:
    run_ = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        PIPELINE,
        {"events": "events", "counts": "counts", "firsts": "firsts"},
        source_partitions=PARTITIONS,
        shuffle_partitions="2",
        expected_workers="2",
    )
    events = _events(27)
    topic = run_.topics["events"]
    placed = [(json.dumps(e).encode(), _partition(str(e["k"]))) for e in events]
    run_.inputs[topic].extend(value for value, _ in placed)
    expected = run(build(), {"events": events}, checkpoint_every=10)
    want = {
        sink: {
            key.encode(): [json.dumps(v).encode() for k, v in expected[sink] if k == key]
            for key in {k for k, _ in expected[sink]}
        }
        for sink in ("counts", "firsts")
    }
    # The pool's keys expire at every phase: their counts start from 1 again.
    assert [int(v) for v in want["counts"][b"pool3"]].count(1) == PHASES

    def feed(part: list[tuple[bytes, int]], seconds: float) -> None:
        size = len(part) // 10 + 1
        for i in range(0, len(part), size):
            run_.send_placed((topic, v, p, None) for v, p in part[i : i + size])
            time.sleep(seconds / 10)

    def kill(index: int) -> None:
        """SIGKILL worker ``index`` while the job works on what was just fed; its replacement
        restores the last checkpoint (the deadlines with it) and replays from there."""
        assert " started on " in run_.log(f"worker-{index}"), f"worker-{index} runs no task"
        run_.kill_worker(index)
        run_.start_worker(index)
        run_.wait_for_checkpoints(3, timeout=180)

    def done() -> bool:
        """An update of the count committed for every record (one each, expired or not)."""
        counts = read_committed(kafka_bootstrap, run_.topics["counts"])
        return sum(map(len, counts.values())) >= len(events)

    run_.start_coordinator(exit_when_idle=False)
    run_.start_worker(0)
    run_.start_worker(1)
    try:
        phase = OWN + POOL
        feed(placed[:100], 0)
        wait_until(run_._sources_committed, 120, "committed positions in every source partition")
        feed(placed[100:phase], 3)
        kill(1)
        feed(placed[phase : 2 * phase], 3)
        kill(0)
        feed(placed[2 * phase : 3 * phase], 3)
        kill(1)
        feed(placed[3 * phase :], 3)
        wait_until(done, 180, "every update committed")
        run_.wait_for_checkpoints(2)  # an extra update would be committed by now
        for sink in ("counts", "firsts"):
            got = updates_per_key(read_committed(kafka_bootstrap, run_.topics[sink]))
            wrong = {k: (got.get(k), want[sink].get(k)) for k in got.keys() | want[sink].keys()}
            wrong = {k: w for k, w in wrong.items() if w[0] != w[1]}
            assert not wrong, f"{sink}: {len(wrong)} keys differ: {sorted(wrong.items())[:3]}"
    finally:
        run_.stop()
