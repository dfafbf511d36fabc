"""Whether a state TTL holds the state flat: a keyed count with ``--ttl-ms`` in event time
(``processor_state_keys``, summed over the keyed tasks) under a steady stream of keys that
each appear a few times and never again, for ``--seconds``.

Without a TTL the state would hold every key ever seen (``keys_seen``); with one it should
hold about the keys of the last TTL plus the watermark's lag, whatever the run's length. The
gauge is RocksDB's estimate (it counts each key's value and its deadline, and deletions only
as compactions drop them), taken at checkpoints. Beside it, per 5 s sample: the median
checkpoint duration since the previous sample (the coordinator's "checkpoint N complete in X s"
lines), the bytes on disk under the checkpoint storage, the keyed tasks'
``processor_state_size_bytes``, and how far the job is behind the input (records sent minus
the source tasks' ``processor_records_in``, their ``processor_consumer_lag_records``, the keyed
tasks' ``processor_event_time_lag_seconds``) and the machine's 1-minute load average. The
summary gives min/median/max of state keys, checkpoint duration and storage size over the
first and the second half of the run (after a warm-up of one TTL plus 10 s). Runs on an
existing broker (``--bootstrap``); prints a JSON line per sample and a summary; writes
``bench/results/ttl-<time>.json``.

    python bench/ttl.py [--bootstrap 127.0.0.1:20692] [--seconds 60] [--rate 1000]
                        [--ttl-ms 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import say
from processor import Pipeline

RESULTS = Path(__file__).resolve().parent / "results"
TTL_MS = 5_000
TTL_ENV = "BENCH_TTL_MS"  # the worker processes' TTL: build() takes topic names only
REPEATS = 4  # records per key, one after another: then the key is gone for good
SAMPLE_S = 5.0
TICK_S = 0.1  # one batched produce per tick, of the records due by then
_CHECKPOINT = re.compile(rb"checkpoint \d+ complete in ([\d.]+)s")


def build(events: str = "events", counts: str = "counts") -> Pipeline:
    """The bench's job: per key, a count (one update per checkpoint) with a TTL of
    ``$BENCH_TTL_MS`` (default 5 s)."""
    ttl_ms = int(os.environ.get(TTL_ENV, TTL_MS))
    p = Pipeline()
    source = p.source(events, value="json", timestamp=lambda e: e["ts"])
    source.key_by(lambda e: e["k"]).count(ttl_ms=ttl_ms).sink(counts)
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(ports: list[int]) -> dict[str, float]:
    """The workers' metrics, summed: ``state_keys`` and ``state_bytes`` of the keyed tasks
    (stage "events.key_by"), ``records_in`` and ``input_lag`` (records left in the source
    topic) of the source tasks; ``event_time_lag_s``: the keyed tasks' largest."""
    out = dict.fromkeys(["state_keys", "state_bytes", "records_in", "input_lag"], 0.0)
    out["event_time_lag_s"] = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            name, _, rest = line.partition("{")
            labels, _, value = rest.rpartition(" ")
            keyed = "key_by" in labels
            v = float(value or 0)
            if name == "processor_state_keys" and keyed:
                out["state_keys"] += v
            elif name == "processor_state_size_bytes" and keyed:
                out["state_bytes"] += v
            elif name == "processor_records_in_total" and not keyed:
                out["records_in"] += v
            elif name == "processor_consumer_lag_records" and not keyed:
                out["input_lag"] += v
            elif name == "processor_event_time_lag_seconds" and keyed:
                out["event_time_lag_s"] = max(out["event_time_lag_s"], v)
    return out


def disk_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` (a file removed meanwhile counts nothing)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += (Path(folder) / name).stat().st_size
    return total


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def halves(samples: list[dict[str, Any]], field: str, start: float, end: float) -> dict[str, Any]:
    """min/median/max of ``field`` over the samples in [start, mid) and [mid, end]."""
    mid = (start + end) / 2
    got = [(s["t_s"], s[field]) for s in samples if s.get(field) is not None]
    return {
        "first_half": spread([v for t, v in got if start <= t < mid]),
        "second_half": spread([v for t, v in got if t >= mid]),
    }


def main() -> int:
    from tests.integration.pipeline_run import PipelineRun

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:20692")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="records per second")
    parser.add_argument("--ttl-ms", type=int, default=TTL_MS, help="the count's state TTL")
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
    run.env[TTL_ENV] = str(args.ttl_ms)
    topic = run.topics["events"]
    storage = Path(run.env["PROCESSOR_CHECKPOINT_DIR"])
    coordinator_log = run.workdir / "coordinator.log"
    log_offset = 0
    ports = [_free_port(), _free_port()]
    samples: list[dict[str, Any]] = []
    run.start_coordinator(exit_when_idle=False)
    for i, port in enumerate(ports):
        run.start_worker(i, metrics_port=port)
    # The records' bytes but for their event time, precomputed: `%` is the only work per
    # record in the loop.
    template = b'{"k":"u%d","ts":%d}'
    sent = 0
    send_s = 0.0  # time spent producing (the harness's own cost)
    try:
        started = time.monotonic()
        next_sample = started + SAMPLE_S
        while (now := time.monotonic()) < started + args.seconds:
            # What is due by now, a second's worth at most (a send that fell behind catches
            # up, but not in one burst).
            batch = min(int(args.rate * (now - started)) - sent, args.rate)
            if batch > 0:
                ts = int(time.time() * 1000)
                run.send_placed(
                    (topic, template % (n, ts), n % 2, None)
                    for n in (i // REPEATS for i in range(sent, sent + batch))
                )
                sent += batch
                send_s += time.monotonic() - now
            if now >= next_sample:
                next_sample += SAMPLE_S
                try:
                    metrics = scrape(ports)
                except OSError as exc:  # a worker still starting
                    say(f"metrics not ready: {exc}")
                    metrics = None
                if metrics is not None:
                    if coordinator_log.exists():
                        with coordinator_log.open("rb") as f:
                            f.seek(log_offset)
                            text = f.read()
                        text = text[: text.rfind(b"\n") + 1]  # whole lines only
                        log_offset += len(text)
                        durations = [float(m) for m in _CHECKPOINT.findall(text)]
                    else:
                        durations = []
                    sample = {
                        "t_s": round(now - started, 1),
                        "sent": sent,
                        "keys_seen": sent // REPEATS,
                        "state_keys": int(metrics["state_keys"]),
                        "state_bytes": int(metrics["state_bytes"]),
                        "checkpoints": len(durations),
                        "checkpoint_s": round(statistics.median(durations), 3)
                        if durations
                        else None,
                        "storage_bytes": disk_bytes(storage),
                        "behind": sent - int(metrics["records_in"]),
                        "input_lag": int(metrics["input_lag"]),
                        "event_time_lag_s": round(metrics["event_time_lag_s"], 2),
                        "load_1m": round(os.getloadavg()[0], 2),  # a shared machine's
                    }
                    samples.append(sample)
                    print(json.dumps(sample), flush=True)
            time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
        elapsed = time.monotonic() - started
    finally:
        run.stop()
    warm_up = args.ttl_ms / 1000 + 10
    late = [s for s in samples if s["t_s"] >= warm_up]
    summary: dict[str, Any] = {
        "seconds": args.seconds,
        "rate": args.rate,
        "ttl_ms": args.ttl_ms,
        "sent": sent,
        "achieved_rate": round(sent / elapsed),
        "send_busy": round(send_s / elapsed, 2),
        "keys_seen": sent // REPEATS,
        "warm_up_s": warm_up,
        **{
            field: halves(samples, field, warm_up, args.seconds)
            for field in ("state_keys", "checkpoint_s", "storage_bytes", "state_bytes")
        },
        "behind_second_half_max": max(
            (s["behind"] for s in late if s["t_s"] >= (warm_up + args.seconds) / 2), default=None
        ),
        "behind_last": samples[-1]["behind"] if samples else None,
        "event_time_lag_s_max": max((s["event_time_lag_s"] for s in late), default=None),
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
