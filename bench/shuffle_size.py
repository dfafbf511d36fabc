"""The shuffle topic's and the checkpoint storage's size over a long steady run: flat, because
the keyed tasks purge the shuffle and delete snapshots no restore can need.

Runs the word count (coordinator + 2 workers) on a steady input rate and samples every
shuffle partition's watermarks: records retained = high - low (what a purge leaves), records
written = high. With ``--log-dir`` (the broker's data directory; `processor kafka start
--data-dir D` keeps the logs in D/data) it also sums the partitions' files on disk. At the end
it drains the input and checks the output is exact. Checkpoint storage: the bytes of every file
under the job's checkpoint directory, and the number of snapshots (manifests) there.

    python bench/shuffle_size.py --bootstrap 127.0.0.1:9092 --minutes 10 --rate 5000 \\
        --log-dir /tmp/processor-kafka/data
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from processor.commands import corpus
from tests.integration.harness import JobRun


def sample(consumer: Consumer, topic: str, partitions: int, log_dir: Path | None) -> dict[str, int]:
    """Records written and retained over all partitions of ``topic``, and its bytes on disk."""
    written = retained = 0
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)
        written += high
        retained += high - low
    disk = -1
    if log_dir is not None:
        disk = sum(
            f.stat().st_size
            for d in log_dir.glob(f"{topic}-*")
            for f in d.iterdir()
            if f.is_file() and f.suffix == ".log"  # indexes are preallocated: not their size
        )
    return {"written": written, "retained": retained, "disk_bytes": disk}


def storage_size(root: Path) -> dict[str, int]:
    """Bytes of all files under ``root`` and the number of complete snapshots."""
    total = snapshots = 0
    # os.walk, not Path.rglob: retention deletes snapshot directories while they are listed, and
    # walk skips a directory that vanished (rglob raised FileNotFoundError from its scandir).
    for directory, _, files in os.walk(root):
        for name in files:
            try:  # retention may delete it between the listing and the stat
                total += os.stat(os.path.join(directory, name)).st_size
            except FileNotFoundError:
                continue
            snapshots += name == "_snapshot.json"
    return {"storage_bytes": total, "snapshots": snapshots}


def measure(
    bootstrap: str,
    seconds: float,
    rate: int,
    sample_s: float,
    log_dir: Path | None,
    segment_bytes: str,
    purge_interval_ms: str,
) -> dict[str, Any]:
    settings = {
        "shuffle_segment_bytes": segment_bytes,
        "shuffle_purge_interval_ms": purge_interval_ms,
    }
    tmp = tempfile.mkdtemp(prefix="shuffle-size-")  # kept: the processes' logs are there
    print(f"logs in {tmp}", file=sys.stderr, flush=True)
    run = JobRun(
        bootstrap,
        Path(tmp),
        interval_ms=1000,
        shuffle_segment_bytes=segment_bytes,
        shuffle_purge_interval_ms=purge_interval_ms,
    )
    step_s = 0.5
    lines = [line.encode() for line in corpus.lines(int(rate * seconds) + rate, seed=7)]
    per_step = max(1, int(len(lines) * step_s / seconds))
    stop = threading.Event()

    def feed() -> None:
        # A steady rate: one chunk every step, at fixed times (a slow produce catches up).
        started = time.monotonic()
        for i, at in enumerate(range(0, len(lines), per_step)):
            if stop.is_set():
                return
            run.produce(lines[at : at + per_step])
            stop.wait(max(0.0, started + (i + 1) * step_s - time.monotonic()))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{run.job}.sizer"})
    topic, partitions = run.settings.shuffle_topic, run.settings.shuffle_partitions
    samples: list[dict[str, Any]] = []
    feeding = threading.Thread(target=feed, daemon=True)
    try:
        run.start_coordinator(exit_when_idle=False)
        run.start_worker(0)
        run.start_worker(1)
        started = time.monotonic()
        feeding.start()
        while time.monotonic() - started < seconds:
            time.sleep(max(0.0, started + (len(samples) + 1) * sample_s - time.monotonic()))
            row = {
                "t_s": round(time.monotonic() - started),
                **sample(consumer, topic, partitions, log_dir),
                **storage_size(Path(tmp) / "checkpoints" / run.job),
            }
            samples.append(row)
            print(json.dumps(row), flush=True)
        stop.set()
        feeding.join(60)
        assert run.coordinator is not None
        run.coordinator.terminate()
        run.coordinator.wait(30)
        run.start_coordinator(exit_when_idle=True)
        run.wait_idle(600)
        verified = run.verify_exactly_once()
    finally:
        stop.set()
        run.stop()
        consumer.close()
    return {
        "seconds": seconds,
        "rate_words_s": rate,
        "words": sum(run.expected.values()),
        "records_verified": verified,
        "settings": settings,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=5000, help="input words per second")
    parser.add_argument("--sample-s", type=float, default=30)
    parser.add_argument("--log-dir", type=Path, help="the broker's log.dirs, for bytes on disk")
    parser.add_argument(
        "--segment-bytes",
        default="1048576",
        help="PROCESSOR_SHUFFLE_SEGMENT_BYTES: purged records free disk a segment at a time",
    )
    parser.add_argument("--purge-interval-ms", default="30000")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args()
    result = measure(
        args.bootstrap,
        args.minutes * 60,
        args.rate,
        args.sample_s,
        args.log_dir,
        args.segment_bytes,
        args.purge_interval_ms,
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(
        f"{'t':>5} {'written':>10} {'retained':>9} {'disk':>10} {'storage':>10} {'snapshots':>9}\n"
        + "\n".join(
            f"{s['t_s']:>4}s {s['written']:>10,} {s['retained']:>9,} {s['disk_bytes']:>10,} "
            f"{s['storage_bytes']:>10,} {s['snapshots']:>9}"
            for s in result["samples"]
        )
    )
    print(f"words {result['words']:,}, output exact ({result['records_verified']:,} records)")


if __name__ == "__main__":
    main()
