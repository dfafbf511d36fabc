"""How this project's checkpoints grow with its state: N distinct keys, then a trickle.

The input is N distinct tokens ``k0 k1 ... k<N-1>``, ``KEYS_PER_LINE`` to a line, so the
job's state ends up with N keys (spread over the 8 keyed tasks). Once a completed checkpoint
covers the whole input (every source task's committed position at the end of its partition:
the state is built), a trickle of updates to random existing keys runs for a while at a low
rate, and the checkpoints completed during it are the steady state: how long one takes
(trigger to the last acknowledgement) and how much it uploads (incremental: new SST files
only) against the full size of the snapshots.

    python bench/scaling.py --keys 100000,1000000     # on its own broker, like bench/run.py

Used by bench/run.py (quick: 100k and 1M keys; full: 1M and 10M).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.harness.measure import ProcessSampler, RateProducer, create_topic, produce_all
from bench.peers.base import Job
from bench.peers.processor_peer import (
    ProcessorPeer,
    checkpoint_summary,
    completed_checkpoints,
)
from processor.kafka.clients import retried

KEYS_PER_LINE = 20


# How long a read of the job's topics is tried again after a transient error.
READ_RETRY_S = 60.0


def key_lines(keys: int, per_line: int = KEYS_PER_LINE) -> list[bytes]:
    """Every key once: ``k0 .. k<keys-1>``, ``per_line`` to a line."""
    return [
        " ".join(f"k{n}" for n in range(start, min(keys, start + per_line))).encode()
        for start in range(0, keys, per_line)
    ]


def trickle_lines(keys: int, words: int, seed: int = 3) -> list[str]:
    """``words`` updates of random existing keys, ``KEYS_PER_LINE`` to a line."""
    rng = random.Random(seed)
    return [
        " ".join(f"k{rng.randrange(keys)}" for _ in range(KEYS_PER_LINE))
        for _ in range(max(1, words // KEYS_PER_LINE))
    ]


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The topic's end offsets, read again after a transient error (`_wait_covered`)."""

    def read() -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.bench-ends"})
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)
            }
        finally:
            consumer.close()

    return retried(read, READ_RETRY_S, pause=1.0)


def _covers(record: dict[str, Any], ends: dict[int, int]) -> bool:
    """Did this checkpoint's source tasks commit positions at (or past) ``ends``?"""
    positions: dict[int, int] = {}
    for task, ack in (record.get("tasks") or {}).items():
        if task.startswith("split-"):
            for p, off in (ack.get("positions") or {}).items():
                positions[int(p)] = int(off)
    return all(positions.get(p, -1) >= end for p, end in ends.items())


def _wait_covered(
    bootstrap: str, job: str, ends: dict[int, int], timeout: float, alive: Any
) -> dict[str, Any]:
    """The first completed checkpoint that covers ``ends``. A read that fails with a
    transient error is tried again (`clients.retried`): on a machine overloaded by other
    work (CI's 2 cores while a test starts a 3-broker cluster) the broker's own KRaft
    controller can fence it for a few seconds ("controller event queue overloaded"), and the
    job recovers from that by itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = retried(lambda: completed_checkpoints(bootstrap, job), READ_RETRY_S, pause=1.0)
        for record in records:
            if _covers(record, ends):
                return record
        if not alive():
            raise RuntimeError("the job exited before its checkpoints covered the input")
        time.sleep(1.0)
    raise TimeoutError(f"no checkpoint covered the input within {timeout:.0f}s")


def state_scaling(
    bootstrap: str,
    keys: int,
    workdir: Path,
    run_id: str,
    *,
    partitions: int = 4,
    interval_ms: int = 1000,
    parallelism: int = 2,
    trickle_words_per_s: int = 2000,
    trickle_s: float = 15.0,
    timeout: float = 900.0,
    say: Any = print,
) -> dict[str, Any]:
    """Build a state of ``keys`` keys, then measure the steady-state checkpoints."""
    peer = ProcessorPeer()
    job = Job(
        bootstrap=bootstrap,
        name=f"bench-state{keys}-{run_id}",
        input_topic=f"state{keys}.input",
        output_topic=f"state{keys}.output",
        workdir=workdir / f"state-{keys}",
        interval_ms=interval_ms,
        parallelism=parallelism,
    )
    lines = key_lines(keys)
    say(f"state {keys:,} keys: producing {len(lines):,} lines of distinct keys")
    create_topic(bootstrap, job.input_topic, partitions)
    create_topic(bootstrap, job.output_topic, partitions)
    produce_all(bootstrap, job.input_topic, lines, partitions)
    del lines
    ends = _ends(bootstrap, job.input_topic, partitions)
    result: dict[str, Any] = {"keys": keys, "keys_per_line": KEYS_PER_LINE}
    running = peer.start(job)
    sampler = ProcessSampler(running.roots)
    sampler.start()
    trickle_from = trickle_to = 0.0
    try:
        built = _wait_covered(bootstrap, job.name, ends, timeout, running.alive)
        first = peer.first_consumed_at(running) or running.started_at
        result["build_s"] = round(float(built["completed_at"]) - first, 3)
        result["build_keys_per_s"] = round(keys / result["build_s"]) if result["build_s"] else None
        say(
            f"state {keys:,} keys: built in {result['build_s']}s (checkpoint {built['id']}); "
            f"trickle of {trickle_words_per_s:,} updates/s for {trickle_s:.0f}s"
        )
        trickle = trickle_lines(keys, int(trickle_words_per_s * trickle_s))
        producer = RateProducer(
            bootstrap, job.input_topic, trickle, trickle_words_per_s, partitions
        )
        trickle_from = time.time()
        producer.start()
        producer.join(trickle_s + 60)
        trickle_to = time.time()
        if producer.error is not None:
            raise RuntimeError(f"the trickle producer failed: {producer.error}")
        # Every update is in a completed checkpoint: the trickle's figures are complete.
        ends = _ends(bootstrap, job.input_topic, partitions)
        _wait_covered(bootstrap, job.name, ends, 120, running.alive)
    except (TimeoutError, RuntimeError) as exc:
        result["error"] = str(exc)
        say(f"state {keys:,} keys: FAILED: {exc}; logs in {job.workdir}")
    finally:
        running.stop()
        sampler.stop()
    records = completed_checkpoints(bootstrap, job.name)
    first = peer.first_consumed_at(running) or running.started_at
    result["peak_rss_mb"] = sampler.report()["peak_rss_mb_sum_of_process_peaks"]
    result["exit_codes"] = running.exit_codes()
    if "error" not in result:
        # The first trickle checkpoint still carries the tail of the build: from one interval
        # after the trickle began to its end.
        result["steady"] = checkpoint_summary(
            records, trickle_from + interval_ms / 1000, trickle_to
        )
        result["build"] = checkpoint_summary(records, None, trickle_from)
    result["timeline"] = [
        {
            "id": int(r["id"]),
            "t": round(float(r["completed_at"]) - first, 3),
            "duration_ms": round(1000 * float(r["duration_s"]), 1),
            "uploaded_bytes": int(r.get("uploaded_bytes", 0)),
            "full_bytes": int(r.get("state_bytes", 0)),
            "records_in": int(r.get("records_in", 0)),
        }
        for r in records
    ]
    result["trickle_window_s"] = (
        [round(trickle_from - first, 3), round(trickle_to - first, 3)] if trickle_to else None
    )
    steady = result.get("steady", {})
    if steady.get("completed"):
        say(
            f"state {keys:,} keys: steady checkpoints p50 {steady['duration_ms_p50']} ms, "
            f"p99 {steady['duration_ms_p99']} ms; uploaded p50 "
            f"{steady['uploaded_bytes_p50'] / 1e6:.2f} MB of "
            f"{steady['full_bytes_p50'] / 1e6:.1f} MB"
        )
    return result
