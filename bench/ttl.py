"""Whether a state TTL holds the state flat: a keyed count with ``ttl_ms`` in event time
(``processor_state_keys``, summed over the keyed tasks) under a steady stream of keys that
each appear a few times and never again, for ``--seconds``.

Without a TTL the state would hold every key ever seen (``keys_seen``); with one it should
hold about the keys of the last TTL plus the watermark's lag, whatever the run's length. The
gauge is RocksDB's estimate (it counts each key's value and its deadline, and deletions only
as compactions drop them), taken at checkpoints. Runs on an existing broker (``--bootstrap``);
prints a JSON line per sample and a summary; writes ``bench/results/ttl-<time>.json``.

    python bench/ttl.py [--bootstrap 127.0.0.1:20692] [--seconds 60] [--rate 1000]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import say
from processor import Pipeline

RESULTS = Path(__file__).resolve().parent / "results"
TTL_MS = 5_000
REPEATS = 4  # records per key, one after another: then the key is gone for good


def build(events: str = "events", counts: str = "counts") -> Pipeline:
    """The bench's job: per key, a count (one update per checkpoint) with a 5 s TTL."""
    p = Pipeline()
    source = p.source(events, value="json", timestamp=lambda e: e["ts"])
    source.key_by(lambda e: e["k"]).count(ttl_ms=TTL_MS).sink(counts)
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state_keys(ports: list[int]) -> int:
    """``processor_state_keys`` of the keyed tasks (stage "events.key_by"), summed."""
    total = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if line.startswith("processor_state_keys{") and "key_by" in line:
                total += float(line.rsplit(" ", 1)[1])
    return int(total)


def main() -> int:
    from tests.integration.pipeline_run import PipelineRun

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:20692")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="records per second")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-ttl-"))
    run = PipelineRun(
        args.bootstrap,
        workdir,
        Path(__file__).resolve(),
        {"events": "events", "counts": "counts"},
        source_partitions=2,
        interval_ms=1000,
        shuffle_partitions="2",
        expected_workers="2",
    )
    topic = run.topics["events"]
    ports = [_free_port(), _free_port()]
    samples: list[dict[str, Any]] = []
    run.start_coordinator(exit_when_idle=False)
    for i, port in enumerate(ports):
        run.start_worker(i, metrics_port=port)
    sent = 0
    try:
        started = time.monotonic()
        next_sample = started + 5
        while (now := time.monotonic()) < started + args.seconds:
            batch = max(1, args.rate // 10)
            ts = int(time.time() * 1000)
            values = [
                json.dumps({"k": f"u{(sent + j) // REPEATS}", "ts": ts}).encode()
                for j in range(batch)
            ]
            run.send_placed(
                (topic, v, (sent + j) // REPEATS % 2, None) for j, v in enumerate(values)
            )
            sent += batch
            if now >= next_sample:
                next_sample += 5
                try:
                    keys = state_keys(ports)
                except OSError as exc:  # a worker still starting
                    say(f"metrics not ready: {exc}")
                    continue
                sample = {
                    "t_s": round(now - started, 1),
                    "keys_seen": sent // REPEATS,
                    "state_keys": keys,
                }
                samples.append(sample)
                print(json.dumps(sample), flush=True)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - now)))
    finally:
        run.stop()
    late = [s["state_keys"] for s in samples if s["t_s"] >= args.seconds / 2]
    summary = {
        "seconds": args.seconds,
        "rate": args.rate,
        "ttl_ms": TTL_MS,
        "keys_seen": sent // REPEATS,
        "state_keys_second_half_min": min(late, default=None),
        "state_keys_second_half_max": max(late, default=None),
        "state_keys_last": samples[-1]["state_keys"] if samples else None,
    }
    print(json.dumps(summary))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ttl-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
