"""py-spy on this project's workers during a bench phase: where the time goes.

    pip install py-spy          # once; a profiler, not a dependency of the project
    python bench/experiments/profile_workers.py --phase latency [--rate 20000] [--seconds 20]
    python bench/experiments/profile_workers.py --phase throughput [--words 4000000] \
        [--pipeline wordcount|emit_record|no_combiner] [--port 29092]

Starts a broker (the bench's 127.0.0.1:29092 unless ``--port``, so never together with
bench/run.py), runs one phase of bench/run.py for this project only (``--pipeline``: word
count, word count with ``count(emit="record")``, or with ``PROCESSOR_COMBINE=false``), and
records both workers with py-spy (``--nonblocking``: the workers are not paused) into
``--out`` (bench/results/profile):

* ``<phase>-worker-0-wall.txt``: wall time, idle threads included (``--idle --threads``,
  py-spy's raw collapsed stacks): where each task thread waits as well as where it works;
* ``<phase>-worker-1-cpu.txt`` and ``<phase>-worker-1-cpu.svg``: CPU only (threads that are
  not idle), as raw stacks and as a flame graph.

``<phase>-summary.json`` (and stdout) has the phase's figures (latency percentiles and the
checkpoint pipeline from the control topic; or throughput and the checkpoint overhead by step)
and, per kind of thread (source task, keyed task, upload, the worker's main loop, the
transactional calls' deadline threads), the seconds and share of its samples per activity,
split by context (inside a checkpoint, processing, the loop). ``thread_cpu`` has the CPU
seconds of every process of the job by the OS name of its threads (from /proc): the Python
threads (py-spy sees only those) against librdkafka's (``rdk:*``) and RocksDB's. The
profilers cost CPU on a 2-core machine: a profiled run's figures are somewhat worse than
bench/run.py's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness.common import say  # noqa: E402
from bench.harness.latency_phase import latency  # noqa: E402
from bench.harness.measure import _label, _tree, exact_counts  # noqa: E402
from bench.harness.modes import PORT, QUICK, Mode  # noqa: E402
from bench.harness.phases import throughput  # noqa: E402
from bench.peers.base import Running  # noqa: E402
from bench.peers.processor_peer import ProcessorPeer  # noqa: E402
from processor.commands import corpus  # noqa: E402
from processor.localkafka.broker import LocalBroker  # noqa: E402

# The context of a sample: the first of these (in this order) found anywhere in its stack ...
CONTEXTS = [
    (
        "checkpoint",
        r"^(SourceTask|KeyedTask)\._checkpoint |^KeyedCheckpoints\.finish "
        r"|^SourceTask\._finish_commit ",
    ),
    ("processing", r"^(SourceTask|KeyedTask)\._process "),
    ("snapshot upload", r"^SnapshotStore\.upload "),
    ("snapshot retain", r"^KeyedCheckpoints\._retain "),
    ("transactional calls thread", r"^SerialCalls\.submit\.<locals>\.run "),
    ("control loop", r"^Worker\.run "),
    ("task loop", r"^(SourceTask|KeyedTask)\.run "),
]
# ... and its activity: the first of these found, innermost first. Frames look like
# "KeyedTask._checkpoint (processor/worker/keyed.py:330)" in py-spy's raw format; a call
# into a C extension (consume, commit_transaction) shows as the Python line that makes it.
ACTIVITIES = [
    ("JSON encode", r"^(dumps|encode|iterencode) \(json/"),
    ("JSON decode", r"^(loads|decode|raw_decode) \(json/"),
    ("wait: the transaction's calls", r"^SerialCalls\.settle "),
    ("wait: step aside for a keyed checkpoint", r"^KeyedSyncPriority\.step_aside "),
    ("consume", r"^consume_ready "),
    ("decode input", r"^SourceTask\._decode "),
    ("shuffle: partition, encode", r"^ShuffleOut\.(take|_encode) "),
    ("shuffle: add", r"^ShuffleOut\.add "),
    ("shuffle: decode", r"^decode_shuffle "),
    ("count per record", r"^PerRecord\."),
    ("aggregate", r"^Aggregate\."),
    ("sink encode", r"^sink \(processor/engine/sink_batch"),
    ("commit_transaction", r"^TransactionalOutput\.commit"),
    ("send_offsets_to_transaction", r"^TransactionalOutput\.send_offsets"),
    ("init/abort transaction", r"^TransactionalOutput\.(init|abort)"),
    ("RocksDB checkpoint", r"^RocksDBStore\.checkpoint "),
    ("RocksDB write/get", r"^RocksDBStore\.(write|get_many) "),
    ("produce to Kafka", r"^TransactionalOutput\.(produce_many|produce|_begin) "),
    ("copy files to storage", r"^DirectoryStorage\."),
    ("tokenize", r"^words \(processor/jobs/wordcount"),
    ("combine / count", r"^(SourceTask|KeyedTask)\._(process|apply|flush) "),
    ("lag / watermarks", r"^(SourceTask|KeyedTask)\._lag "),
    ("report (control producer)", r"^Worker\.send "),
    ("consume (poll: waiting for records)", r"^(SourceTask|KeyedTask)\.run "),
    ("control consume (poll)", r"^Worker\.run "),
    ("idle executor", r"^_worker \(concurrent/futures/thread"),
]


def _thread_kind(thread: str) -> str:
    name = thread.split(": ", 1)[-1]
    if name.startswith("split-"):
        return "source task"
    if name.startswith("count-"):
        return "keyed task"
    if name.startswith("upload-"):
        return "upload"
    if name == "MainThread":
        return "worker main loop"
    return "transactional call (deadline thread)" if ":" in name else "other"


def summarize(raw: str, rate: int) -> dict[str, Any]:
    """Per kind of thread, seconds and share of its samples per "context: activity" (py-spy
    raw format with --threads: ``thread (tid): name;outermost;...;innermost count``)."""
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        kind = _thread_kind(frames[0]) if frames[0].startswith("thread ") else "?"
        body = [f for f in frames if not f.startswith(("thread ", "process "))]
        context = next(
            (c for c, pattern in CONTEXTS for f in body if re.search(pattern, f)), "other"
        )
        activity = next(
            (a for f in reversed(body) for a, pattern in ACTIVITIES if re.search(pattern, f)),
            body[-1].split(" (")[0] if body else "?",
        )
        by_kind[kind][f"{context}: {activity}"] += int(count)
    out: dict[str, Any] = {}
    for kind, counter in sorted(by_kind.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(counter.values())
        out[kind] = {
            "seconds": round(total / rate, 2),
            "top": {
                a: {"s": round(n / rate, 2), "pct": round(100 * n / total, 1)}
                for a, n in counter.most_common(12)
            },
        }
    return out


def _thread_group(comm: str) -> str:
    if comm.startswith("rdk:"):
        return "librdkafka"
    if comm.startswith("rocksdb"):
        return "rocksdb"
    return "python" if comm.startswith("python") else f"other ({comm})"


class ThreadCpu:
    """The CPU seconds of every thread of the job's processes, by process and thread group,
    polled until `stop` (a thread's last sample counts: it may end before the job)."""

    def __init__(self, running: Running, every: float = 0.5) -> None:
        self._running = running
        self._seen: dict[tuple[int, int], tuple[str, str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(every,), daemon=True)
        self._thread.start()

    def _poll(self, every: float) -> None:
        tick = 100.0  # SC_CLK_TCK on Linux
        while not self._stop.is_set():
            for pid in _tree(self._running.roots):
                label = _label(pid)
                with contextlib.suppress(OSError):
                    for task in Path(f"/proc/{pid}/task").iterdir():
                        stat = (task / "stat").read_text()
                        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                        fields = stat[stat.rindex(")") + 2 :].split()
                        cpu = (int(fields[11]) + int(fields[12])) / tick
                        self._seen[(pid, int(task.name))] = (label, _thread_group(comm), cpu)
            self._stop.wait(every)

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        self._thread.join()
        out: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for label, group, cpu in self._seen.values():
            out[label][group] = round(out[label].get(group, 0.0) + cpu, 2)
        return dict(out)


def _workers(running: Running) -> dict[str, int]:
    """worker-N -> pid, among the processes of ``processor local``."""
    found = {}
    for pid in _tree(running.roots):
        label = _label(pid)
        match = re.search(r"worker-(\d+)", Path(f"/proc/{pid}/cmdline").read_text("latin-1"))
        if "processor" in label and match:
            found[f"worker-{match.group(1)}"] = pid
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("latency", "throughput"), default="latency")
    parser.add_argument("--rate", type=int, default=20_000, help="latency: words/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency: measured seconds")
    parser.add_argument("--words", type=int, default=4_000_000, help="throughput: corpus size")
    parser.add_argument(
        "--pipeline", choices=("wordcount", "emit_record", "no_combiner"), default="wordcount"
    )
    parser.add_argument("--port", type=int, default=PORT, help="the broker's (controller +1)")
    parser.add_argument("--sample-rate", type=int, default=100, help="py-spy samples/s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profile")
    args = parser.parse_args()
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    phase: str = args.phase
    mode = Mode(**{**QUICK.__dict__, "latency_s": args.seconds})
    profilers: list[subprocess.Popen[bytes]] = []
    threads: list[ThreadCpu] = []
    duration = int(mode.latency_warmup_s + mode.latency_s + 2) if phase == "latency" else 600
    plans = {
        f"{phase}-worker-0-wall.txt": ("worker-0", ["--idle", "--threads", "--format", "raw"]),
        f"{phase}-worker-1-cpu.txt": ("worker-1", ["--threads", "--format", "raw"]),
        f"{phase}-worker-1-cpu.svg": ("worker-1", []),
    }

    def attach(running: Running) -> None:
        deadline = time.monotonic() + 20
        workers = _workers(running)
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _workers(running)
        say(f"py-spy on {workers}")
        threads.append(ThreadCpu(running))
        for name, (worker, extra) in plans.items():
            if worker in workers:
                cmd = [spy, "record", "--nonblocking", "--rate", str(args.sample_rate)]
                cmd += ["--duration", str(duration), "--pid", str(workers[worker]), *extra]
                cmd += ["-o", str(out / name)]
                profilers.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))

    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    if args.pipeline == "emit_record":
        spec = ROOT / "bench" / "pipelines" / "wordcount_emit_record.py"
        peer = ProcessorPeer(pipeline=f"{spec}:pipeline")
    elif args.pipeline == "no_combiner":
        peer = ProcessorPeer(env={"PROCESSOR_COMBINE": "false"})
    else:
        peer = ProcessorPeer()
    run_id = time.strftime("%Y%m%d%H%M%S")
    try:
        broker.start()
        if phase == "latency":
            result = latency(peer, broker, args.rate, mode, tmp, run_id, on_ready=attach)
        else:
            text = list(corpus.lines(args.words, seed=1))
            expected = dict(exact_counts(text))
            lines = [line.encode() for line in text]
            del text
            result = throughput(peer, broker, lines, expected, tmp, run_id, 600, on_start=attach)
    finally:
        for proc in profilers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    keep = [
        *("rate_words_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "lines", "verified_exact"),
        *("pipeline_ms", "checkpoints", "error", "ok", "words_per_s", "cpu_s_per_million_words"),
        *("checkpoint_blocking", "checkpoint_summary"),
    ]
    summary: dict[str, Any] = {
        "phase": phase,
        "pipeline": args.pipeline,
        "thread_cpu": threads[0].stop() if threads else {},
        "figures": {k: result[k] for k in keep if k in result},
        "sample_rate": args.sample_rate,
    }
    for name in plans:
        if name.endswith(".txt") and (out / name).exists():
            summary[name] = summarize((out / name).read_text(), args.sample_rate)
    (out / f"{phase}-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0 if result.get("error") is None and result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
