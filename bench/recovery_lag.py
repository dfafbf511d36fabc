"""Recovery after SIGKILL, timed by the consumer lag, for this project, Kafka Streams and Flink.

The state first holds ``--keys`` distinct keys (``k0 .. k<N-1>``, each once, a backlog), then
input arrives at a fixed rate (``--rate`` words/s, 20 random existing keys to a line) into a
4-partition topic; each system runs with a parallelism of 2. The lag is the sum over the input
partitions of the end offset minus the offset the system committed to its consumer group,
polled every 150 ms (what an operator's lag alert watches).

Per kill: a baseline window (``--baseline-s``) of lag samples; the band is twice the window's
median lag, at least half a second of input (500 lines at 20,000 words/s: a median near 0
would make a band that ordinary jitter leaves); SIGKILL one process of the system and start it
again at once (a supervisor); recovery is the time from the kill to the start of the first run
of in-band samples that lasts ``--hold-s``, after the lag has left the band. A kill whose lag
never leaves the band within ``--observe-s`` is reported as ``never_left_band`` and left out
of the median: it is not a recovery of 0 s, the lag just cannot tell how long it took. Every
system loses one of its two processing processes and keeps the rest (issue #29, like for
like):

  processor       coordinator + 2 workers as processes; worker-0 is killed
  kafka_streams   2 instances (processes) of 1 stream thread each, tuned as in the
                  throughput runs, with static membership (group.instance.id); instance 0
                  is killed
  flink           a standalone session cluster (bench/peers/flink_cluster.py): a JobManager
                  JVM and 2 TaskManager JVMs of 1 slot each; TaskManager tm-0 is killed and a
                  replacement with the same resource id started; the JobManager restarts the
                  job from its latest completed checkpoint by itself (fixed-delay restarts,
                  1 s heartbeats); the source commits offsets on checkpoints

After the kills the input stops; once the lag is 0 the committed output must hold the exact
count of every key (bench/harness/measure.py OutputWatcher, as bench/run.py judges it).

    python bench/recovery_lag.py --port 29992 --systems processor,kafka_streams,flink \\
        --keys 1000000 --kills 10 --rate 20000

The broker must already run on ``--port`` (``processor kafka start --port ...``). Writes
``bench/results/<timestamp>-recovery-lag.json``; a summary table on stderr; the last stdout
line is the JSON report.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import Consumer, Producer, TopicPartition

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import say
from bench.harness.measure import OutputWatcher, create_topic, produce_all
from bench.harness.scaling import KEYS_PER_LINE, key_lines
from bench.peers import flink_cluster, flink_peer, kstreams_peer
from bench.peers.base import Running, spawn
from processor.kafka.clients import retried, watermark_offsets

PARTITIONS = 4
PARALLELISM = 2
INTERVAL_MS = 1000  # checkpoint / commit interval of every system
POLL_S = 0.15
# How long the lag reader asks again while the group's coordinator is moving or loading (a
# broker started seconds before answers NOT_COORDINATOR until its offsets topic is loaded).
RETRY_S = 60.0
RESULTS = Path(__file__).resolve().parent / "results"


# ------------------------------------------------------------------------------ input


class SteadyInput(threading.Thread):
    """``KEYS_PER_LINE`` random existing keys to a line at ``words_per_s`` until ``stop``;
    line i into partition i % partitions. ``counts`` is what was sent (and acknowledged)."""

    def __init__(
        self, bootstrap: str, topic: str, keys: int, words_per_s: float, seed: int = 7
    ) -> None:
        super().__init__(daemon=True, name="steady-input")
        self.topic = topic
        self.keys = keys
        self.lines_per_s = words_per_s / KEYS_PER_LINE
        self.rng = random.Random(seed)
        self.counts: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "compression.type": "lz4",
            }
        )

    def run(self) -> None:
        try:
            start = time.monotonic()
            while not self._halt.is_set():
                due = int((time.monotonic() - start) * self.lines_per_s)
                while self.sent < due:
                    words = [f"k{self.rng.randrange(self.keys)}" for _ in range(KEYS_PER_LINE)]
                    value = " ".join(words).encode()
                    while True:
                        try:
                            self._producer.produce(
                                self.topic, value, partition=self.sent % PARTITIONS
                            )
                            break
                        except BufferError:
                            self._producer.poll(0.05)
                    self.counts.update(words)
                    self.sent += 1
                self._producer.poll(0)
                self._halt.wait(0.01)
            if self._producer.flush(120):
                raise RuntimeError(f"records to {self.topic} not acknowledged")
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.join(180)
        if self.error is not None:
            raise RuntimeError(f"the steady input failed: {self.error!r}")


# ------------------------------------------------------------------------------ lag


class LagMonitor(threading.Thread):
    """``samples``: (wall time, lag) every ``POLL_S``: end offsets of the input minus the
    group's committed offsets (a partition without a commit counts from 0)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True, name="lag-monitor")
        self.topic = topic
        self.group = group
        self.samples: list[tuple[float, int]] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._ends = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}.lag-probe"})
        # Committed offsets through a consumer of the group (never joining it), not the admin
        # client, whose request can die of SIGSEGV (see clients.committed_offsets).
        self._offsets = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )

    def lag(self) -> int:
        parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        committed = {
            tp.partition: max(tp.offset, 0)
            for tp in retried(lambda: self._offsets.committed(parts, timeout=10), RETRY_S, 0.5)
        }
        total = 0
        for p in range(PARTITIONS):
            _, high = watermark_offsets(self._ends, TopicPartition(self.topic, p), timeout=10)
            total += high - committed.get(p, 0)
        return total

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self.samples.append((time.time(), self.lag()))
                self._halt.wait(POLL_S)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc
        finally:
            self._ends.close()
            self._offsets.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def since(self, t0: float) -> list[tuple[float, int]]:
        return [s for s in list(self.samples) if s[0] >= t0]

    def wait(self, ok: Any, hold_s: float, timeout: float, what: str) -> float:
        """Until ``ok(lag)`` held for ``hold_s``; returns when that run began."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.error is not None:
                raise RuntimeError(f"reading the lag failed: {self.error!r}")
            run_start = held_since(self.samples, ok, hold_s)
            if run_start is not None:
                return run_start
            time.sleep(POLL_S)
        last = self.samples[-1][1] if self.samples else None
        raise TimeoutError(f"{what}: not within {timeout:.0f}s (lag now {last})")


def held_since(samples: list[tuple[float, int]], ok: Any, hold_s: float) -> float | None:
    """Start of the last run of samples for which ``ok`` holds, if it has lasted ``hold_s``."""
    run_start = None
    for t, lag in samples:
        run_start = (t if run_start is None else run_start) if ok(lag) else None
    if run_start is not None and samples and samples[-1][0] - run_start >= hold_s:
        return run_start
    return None


def band_for(window: list[int], lines_per_s: float) -> int:
    """The recovered band of a baseline window of lag samples: twice their median, at least
    half a second of input (the floor for a median near 0)."""
    return max(int(2 * statistics.median(window)), math.ceil(lines_per_s / 2))


@dataclass(frozen=True)
class Recovery:
    """A kill's verdict: ``seconds`` from the kill to the start of the held in-band run after
    the lag left the band, or ``never_left_band`` (then ``seconds`` is None)."""

    seconds: float | None
    never_left_band: bool = False


def recovery(
    samples: list[tuple[float, int]],
    killed_at: float,
    band: int,
    hold_s: float,
    observe_s: float = 30,
) -> Recovery | None:
    """The verdict on a kill from the lag samples so far; None while undecided (the lag is
    out of the band, or has not left it yet and ``observe_s`` has not passed)."""
    after = [(t, lag) for t, lag in samples if t >= killed_at]
    left = next(
        (i for i, (t, lag) in enumerate(after) if lag > band and t - killed_at <= observe_s),
        None,
    )
    if left is None:
        if after and after[-1][0] - killed_at >= observe_s:
            return Recovery(None, never_left_band=True)
        return None
    run_start = None
    for t, lag in after[left:]:
        if lag <= band:
            run_start = t if run_start is None else run_start
            if t - run_start >= hold_s:
                return Recovery(run_start - killed_at)
        else:
            run_start = None
    return None


def summarize(kills: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max over the kills whose lag left the band; how many never did."""
    times = [k["recovery_s"] for k in kills if k.get("recovery_s") is not None]
    return {
        "recovery_s_median": round(statistics.median(times), 2) if times else None,
        "recovery_s_max": max(times) if times else None,
        "kills_recovered": len(times),
        "kills_never_left_band": sum(1 for k in kills if k.get("never_left_band")),
    }


# ------------------------------------------------------------------------------ systems


class System(ABC):
    """One system's processes; ``kill_one`` SIGKILLs one and starts it again at once."""

    name: ClassVar[str]
    CONFIG: ClassVar[dict[str, str]] = {}  # what differs from the system's defaults

    def __init__(self, bootstrap: str, job: str, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.job = job
        self.workdir = workdir
        self.input_topic = f"{job}.input"
        self.output_topic = f"{job}.output"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    @property
    def group(self) -> str:
        return self.job

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def kill_one(self) -> float:
        """SIGKILL, then restart; returns the wall time of the kill."""

    def _spawn(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        self.procs.append(spawn(cmd, log, env))
        self.logs.append(log)
        return len(self.procs) - 1

    def _kill(self, index: int) -> float:
        proc = self.procs[index]
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        return killed_at

    def running(self) -> Running:
        return Running([p for p in self.procs if p.poll() is None], self.logs)


class ProcessorSystem(System):
    name: ClassVar[str] = "processor"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PROCESSOR_BOOTSTRAP_SERVERS": self.bootstrap,
            "PROCESSOR_JOB_NAME": self.job,
            "PROCESSOR_INPUT_TOPIC": self.input_topic,
            "PROCESSOR_OUTPUT_TOPIC": self.output_topic,
            "PROCESSOR_STATE_DIR": str(self.workdir / "state"),
            "PROCESSOR_CHECKPOINT_DIR": str(self.workdir / "checkpoints"),
            "PROCESSOR_CHECKPOINT_INTERVAL_MS": str(INTERVAL_MS),
            "PROCESSOR_SHUFFLE_PARTITIONS": str(PARTITIONS),
            "PROCESSOR_METRICS_PORT": "0",
            "PROCESSOR_LOG_FORMAT": "text",
        }

    def _worker(self, index: int) -> list[str]:
        return [sys.executable, "-m", "processor", "worker", "--worker-id", f"worker-{index}"]

    def start(self) -> None:
        env = self._env()
        self._spawn(
            [sys.executable, "-m", "processor", "coordinator"],
            self.workdir / "coordinator.log",
            env,
        )
        for i in range(PARALLELISM):
            self._spawn(self._worker(i), self.workdir / f"worker-{i}.log", env)

    def kill_one(self) -> float:
        killed_at = self._kill(1)  # worker-0
        self.procs[1] = spawn(self._worker(0), self.workdir / "worker-0.log", self._env())
        return killed_at


class KafkaStreamsSystem(System):
    name: ClassVar[str] = "kafka_streams"

    # As in the throughput runs (bench/peers/kstreams_peer.py), plus static membership, the
    # Kafka docs' advice for restarts: the restarted instance takes its tasks back at once
    # instead of waiting for the dead member's session.timeout.ms (45 s) and a rebalance.
    CONFIG: ClassVar[dict[str, str]] = {
        "jvm": f"-Xms{kstreams_peer.HEAP} -Xmx{kstreams_peer.HEAP}",
        **kstreams_peer.TUNING,
        "group.instance.id": "<job>-<instance> (static membership)",
    }

    def _instance(self, index: int) -> list[str]:
        java = shutil.which("java") or "java"
        heap = kstreams_peer.HEAP
        return [
            java,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-jar",
            str(kstreams_peer.JAR),
            self.bootstrap,
            self.input_topic,
            self.output_topic,
            self.job,
            str(self.workdir / f"kstreams-state-{index}"),
            "1",
            str(INTERVAL_MS),
            *(f"{k}={v}" for k, v in kstreams_peer.TUNING.items()),
            f"group.instance.id={self.job}-{index}",
        ]

    def start(self) -> None:
        kstreams_peer.KafkaStreamsPeer().prepare()
        for i in range(PARALLELISM):
            self._spawn(self._instance(i), self.workdir / f"kstreams-{i}.log")

    def kill_one(self) -> float:
        killed_at = self._kill(0)
        self.procs[0] = spawn(self._instance(0), self.workdir / "kstreams-0.log")
        return killed_at


class FlinkSystem(System):
    """A session cluster: procs[0] the JobManager, procs[1 + i] TaskManager tm-<i>."""

    name: ClassVar[str] = "flink"
    CONFIG: ClassVar[dict[str, str]] = {
        "deployment": "standalone session cluster: 1 JobManager JVM, 2 TaskManager JVMs of "
        "1 slot each (taskmanager.resource-id tm-0, tm-1), JVM flags from Flink's "
        "BashJavaUtils; the job submitted detached over REST, parallelism 2",
        "job": "as bench/peers/flink_peer.py: RocksDB, incremental checkpoints, "
        "EXACTLY_ONCE every 1000 ms, transactional KafkaSink",
        "kill": "SIGKILL TaskManager tm-0, start a replacement tm-0 at once",
        **flink_cluster.RECOVERY_CONFIG,
    }

    def __init__(self, bootstrap: str, job: str, workdir: Path) -> None:
        super().__init__(bootstrap, job, workdir)
        self.cluster = flink_cluster.FlinkSessionCluster(workdir, PARALLELISM)
        self.job_id: str | None = None

    def start(self) -> None:
        flink_peer.FlinkPeer().prepare()
        self.cluster.write_config()
        self.procs.append(self.cluster.start_jobmanager())
        self.logs.append(self.workdir / "jobmanager.log")
        for i in range(PARALLELISM):
            self.procs.append(self.cluster.start_taskmanager(i))
            self.logs.append(self.workdir / f"taskmanager-{i}.log")
        self.cluster.wait_taskmanagers(PARALLELISM, self.procs)
        args = [self.bootstrap, self.input_topic, self.output_topic, self.job]
        args += [str(self.workdir / "flink"), str(PARALLELISM), str(INTERVAL_MS)]
        self.job_id = self.cluster.submit(args, self.workdir / "submit.log")
        say(f"flink: job {self.job_id} submitted to the session cluster")

    def kill_one(self) -> float:
        killed_at = self._kill(1)  # TaskManager tm-0
        self.procs[1] = self.cluster.start_taskmanager(0)
        return killed_at

    def restarts(self) -> int | None:
        return None if self.job_id is None else self.cluster.restarts(self.job_id)

    def tasks_running(self) -> bool | None:
        return None if self.job_id is None else self.cluster.tasks_running(self.job_id)


SYSTEMS: dict[str, type[System]] = {
    s.name: s for s in (ProcessorSystem, KafkaStreamsSystem, FlinkSystem)
}


# ------------------------------------------------------------------------------ output


class FinalWatcher(OutputWatcher):
    """An OutputWatcher whose expected counts are only known at the end (the steady input
    runs until the kills are done): ``expect`` sets them and re-judges what was read."""

    def __init__(self, bootstrap: str, topic: str, expected: dict[str, int]) -> None:
        super().__init__(bootstrap, topic, expected)
        self._lock = threading.Lock()

    def _poll(self, timeout: float) -> int:
        with self._lock:
            return super()._poll(timeout)

    def expect(self, expected: dict[str, int]) -> None:
        with self._lock:
            self.expected = expected
            current = self.current
            self._matched = sum(1 for w, n in expected.items() if current.get(w) == n)
            if self._matched == len(expected) and not self.unknown:
                self.exact_at = time.time()
                self._exact.set()


# ------------------------------------------------------------------------------ one run


def measure(
    system_cls: type[System], bootstrap: str, keys: int, rate: float, kills: int, args: Any
) -> dict[str, Any]:
    job = f"rl-{system_cls.name.replace('_', '')}-{uuid.uuid4().hex[:6]}"
    workdir = Path(tempfile.mkdtemp(prefix=f"recovery-lag-{system_cls.name}-"))
    say(f"{system_cls.name}: job {job}, logs in {workdir}")
    system = system_cls(bootstrap, job, workdir)
    create_topic(bootstrap, system.input_topic, PARTITIONS)
    create_topic(bootstrap, system.output_topic, PARTITIONS)
    preload = key_lines(keys)
    produce_all(bootstrap, system.input_topic, preload, PARTITIONS)
    del preload
    watcher = FinalWatcher(bootstrap, system.output_topic, {f"k{n}": 1 for n in range(keys)})
    lag = LagMonitor(bootstrap, system.input_topic, system.group)
    steady = SteadyInput(bootstrap, system.input_topic, keys, rate)
    lines_per_s = rate / KEYS_PER_LINE
    result: dict[str, Any] = {"job": job, "logs": str(workdir), "kills": []}
    started = time.time()
    try:
        watcher.start()
        system.start()
        started = time.time()  # the system's start, the origin of the lag timeline
        lag.start()
        steady.start()
        # The backlog of keys first: caught up once the lag stays under 3 s of input.
        caught_up = lag.wait(lambda n: n < 3 * lines_per_s, 5, args.catch_up_timeout, "catching up")
        result["caught_up_s"] = round(caught_up - started, 1)
        say(f"{system.name}: caught up after {caught_up - started:.1f}s; warm-up")
        time.sleep(args.warmup_s)
        band = None
        for k in range(kills):
            settled = None
            if band is not None:
                # The previous kill's tail out of the next baseline: the lag back in the
                # previous band for --settle-s (a restarted instance may go on restoring, or
                # catching up, after the lag first came back).
                try:
                    lag.wait(lambda n, b=band: n <= b, args.settle_s, 120, "settling")
                    settled = True
                except TimeoutError:
                    settled = False
            window_start = time.time()
            time.sleep(args.baseline_s)
            window = [n for _, n in lag.since(window_start)]
            band = band_for(window, lines_per_s)
            killed_at = system.kill_one()
            deadline = killed_at + args.recovery_timeout
            outcome = None
            # Flink: when every task runs again (after the failover was seen), from its REST
            # API: the job's own recovery, before it catches up with the lag.
            failed_over, running_again = False, None
            while time.time() < deadline:
                outcome = recovery(
                    lag.since(killed_at), killed_at, band, args.hold_s, args.observe_s
                )
                if outcome is not None:
                    break
                if isinstance(system, FlinkSystem) and running_again is None:
                    running = system.tasks_running()
                    failed_over = failed_over or running is False
                    if failed_over and running:
                        running_again = round(time.time() - killed_at, 2)
                time.sleep(POLL_S)
            after = [n for _, n in lag.since(killed_at)]
            entry = {
                "kill": k + 1,
                "baseline_median": int(statistics.median(window)),
                "baseline_max": max(window),
                # How often the lag was above the band with nothing killed: ordinary jitter
                # that a kill's figure may include.
                "baseline_share_above_band": round(sum(n > band for n in window) / len(window), 3),
                "band": band,
                "settled_before_baseline": settled,
                "peak_lag": max(after, default=None),
                "recovery_s": None
                if outcome is None or outcome.seconds is None
                else round(outcome.seconds, 2),
                "never_left_band": outcome is not None and outcome.never_left_band,
            }
            if isinstance(system, FlinkSystem):
                entry["flink_tasks_running_again_s"] = running_again
                entry["flink_restarts_so_far"] = system.restarts()
            result["kills"].append(entry)
            say(f"{system.name}: kill {k + 1}: {entry}")
            if outcome is None:
                raise TimeoutError(f"lag not back in its band {args.recovery_timeout}s after kill")
        steady.stop()
        say(f"{system.name}: input stopped ({steady.sent} lines); waiting for lag 0")
        lag.wait(lambda n: n == 0, 0, args.drain_timeout, "draining")
        expected = {f"k{n}": 1 for n in range(keys)}
        for word, n in steady.counts.items():
            expected[word] += n
        watcher.expect(expected)
        watcher.wait_exact(args.drain_timeout, alive=lambda: system.running().alive())
        result["exact_after_drain"] = True
    except (TimeoutError, RuntimeError, AssertionError) as exc:
        result["error"] = str(exc)
        say(f"{system.name}: {exc}")
    finally:
        if steady.is_alive():
            with contextlib.suppress(RuntimeError):
                steady.stop()
        lag.stop()
        killed = system.running().stop()
    verdict = watcher.finish() if "error" not in result else None
    if verdict is None:
        watcher.close()
    else:
        result["exact"] = verdict.exact
        result["output_records"] = verdict.records
        result["wrong_final"] = verdict.wrong_final
        result["missing_words"] = verdict.missing_words
        result["unknown_words"] = verdict.unknown_words
        result["not_increasing_updates"] = verdict.not_increasing
        result["examples"] = verdict.examples
    result["input_lines_at_rate"] = steady.sent
    result["killed_at_stop"] = len(killed)
    result.update(summarize(result["kills"]))
    result["lag_timeline"] = [(round(t - started, 2), n) for t, n in lag.samples]
    return result


def table(report: dict[str, Any]) -> str:
    rows = [f"{'system':<15}{'kills':>6}{'never left':>11}{'median s':>10}{'max s':>8}  exact"]
    for name, r in report["systems"].items():
        rows.append(
            f"{name:<15}{len(r['kills']):>6}{r.get('kills_never_left_band', 0):>11}"
            f"{r['recovery_s_median'] or '-':>10}{r['recovery_s_max'] or '-':>8}"
            f"  {r.get('exact', 'error: ' + r.get('error', ''))}"
        )
        figures = [
            "never left the band" if k["never_left_band"] else f"{k['recovery_s']} s"
            for k in r["kills"]
        ]
        rows.append(f"{'':<15}per kill: {', '.join(figures) or '-'}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9092, help="broker on 127.0.0.1:PORT")
    parser.add_argument("--systems", default="processor,kafka_streams,flink")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20_000, help="words/s")
    parser.add_argument("--warmup-s", type=float, default=10)
    parser.add_argument("--baseline-s", type=float, default=10)
    parser.add_argument("--hold-s", type=float, default=1)
    parser.add_argument(
        "--settle-s",
        type=float,
        default=5,
        help="after a recovery, the lag in that kill's band this long before the next baseline",
    )
    parser.add_argument(
        "--observe-s",
        type=float,
        default=30,
        help="a kill whose lag has not left the band this long after it never left it",
    )
    parser.add_argument("--recovery-timeout", type=float, default=180)
    parser.add_argument("--catch-up-timeout", type=float, default=900)
    parser.add_argument("--drain-timeout", type=float, default=300)
    args = parser.parse_args()
    bootstrap = f"127.0.0.1:{args.port}"
    report: dict[str, Any] = {
        "bench": "recovery-lag",
        "keys": args.keys,
        "rate_words_per_s": args.rate,
        "kills": args.kills,
        "partitions": PARTITIONS,
        "parallelism": PARALLELISM,
        "commit_interval_ms": INTERVAL_MS,
        "band": "2 x the median lag of the baseline window, at least 0.5 s of input; "
        f"recovered once back in it for {args.hold_s}s after the lag left it; a kill whose "
        f"lag stayed in it for {args.observe_s}s is never_left_band, not counted",
        "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()} at the start "
        "(shared with other jobs)",
        "systems": {},
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-recovery-lag.json"
    started = report["machine"]
    for name in args.systems.split(","):
        report["systems"][name] = measure(
            SYSTEMS[name], bootstrap, args.keys, args.rate, args.kills, args
        )
        report["systems"][name]["config"] = SYSTEMS[name].CONFIG
        # After every system: a later one that never ends keeps what was measured.
        report["machine"] = f"{started}, {os.getloadavg()} after {name}"
        out.write_text(json.dumps(report, indent=1) + "\n")
        say(f"written {out}")
    print(table(report), file=sys.stderr, flush=True)
    summary = {
        name: {
            "recovery_s_median": r.get("recovery_s_median"),
            "recovery_s_max": r.get("recovery_s_max"),
            "kills_never_left_band": r.get("kills_never_left_band"),
            "recovery_s": [k["recovery_s"] for k in r["kills"]],
            "exact": r.get("exact"),
            "error": r.get("error"),
        }
        for name, r in report["systems"].items()
    }
    print(json.dumps({"file": str(out), "keys": args.keys, "systems": summary}))


if __name__ == "__main__":
    main()
