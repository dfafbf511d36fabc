"""Latency at half a system's capacity: the bulk from the JVM load generator, probes from here.

The per-line latency of bench/harness/latency_phase.py times every line one Python producer
sends, and that producer tops out near 500 k words/s on this machine (``MAX_LATENCY_RATE``):
the full run's half-capacity points were capped there, below this project's half. Here the
bulk comes from ``bench/loadgen`` (`LoadGenerator`, the capacity phase's JVM producer) at the
rate, and a small Python producer beside it sends ``PROBES_PER_S`` probe lines into the same
partitions, round robin, each one word of its own (``latprobe<run>x<n>``). A probe's latency:
from when it was handed to its producer until the committed output (read_committed,
`OutputWatcher`) first shows its word. A probe waits where the bulk's lines wait (the same
partitions, fetches, epochs and transactions), so its latency is a sample of theirs; probes add
``PROBES_PER_S`` lines a second (0.01 % of the lines at 500 k words/s).

Every run is checked exact: once the generator stops, the committed output must hold the counts
of everything it sent (it says which pool lines, how often) plus the probes. At half capacity a
point is ``runs`` runs (3 in the full mode): p50 and p99 are the medians of the runs', with
their ranges.

    result = latency_half(peer, broker, rate, mode, workdir, run_id, interval_ms=1000, runs=3)
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.harness.common import say
from bench.harness.loadgen import LoadGenerator
from bench.harness.measure import OutputWatcher, create_topic, percentile, produce_all
from bench.harness.modes import PARALLELISM, PARTITIONS, Mode
from bench.harness.phases import both_alive, check_broker, wait_reading
from bench.peers.base import Job, Peer
from processor.commands import corpus
from processor.localkafka.broker import LocalBroker

PROBES_PER_S = 50
POOL_LINES = 100_000
READY_PROBE = "benchprobe"
ON_RATE_MS = 100  # the generator is on its rate: its sends lag it by no more


class Probes(threading.Thread):
    """``PROBES_PER_S`` one-word lines a second into ``topic``, round robin, each handed to
    the producer at ``sent_at[n]``, until `stop`."""

    def __init__(self, bootstrap: str, topic: str, prefix: str) -> None:
        super().__init__(daemon=True, name=f"probes-{topic}")
        self.topic, self.prefix = topic, prefix
        self.sent_at: list[float] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0}
        )

    def word(self, n: int) -> str:
        return f"{self.prefix}{n}"

    def run(self) -> None:
        try:
            start = time.monotonic()
            n = 0
            while not self._halt.is_set():
                wait = start + n / PROBES_PER_S - time.monotonic()
                if wait > 0 and self._halt.wait(wait):
                    break
                self.sent_at.append(time.time())
                self._producer.produce(self.topic, self.word(n).encode(), partition=n % PARTITIONS)
                self._producer.poll(0)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - the run reports it
            self.error = exc
        finally:
            left = self._producer.flush(60)
            if left and self.error is None:
                self.error = RuntimeError(f"{left} probes not acknowledged")

    def stop(self) -> None:
        """Stop sending and wait for the acknowledgements; a no-op on probes never started
        (a run that failed before its input began)."""
        self._halt.set()
        if self.ident is not None:
            self.join(90)


def latency_half(
    peer: Peer,
    broker: LocalBroker,
    rate: int,
    mode: Mode,
    workdir: Path,
    run_id: str,
    interval_ms: int,
    runs: int,
) -> dict[str, Any]:
    """``runs`` runs of `latency_jvm` at ``rate``: the medians of their p50 and p99 with the
    ranges, and every run."""
    done = [
        latency_jvm(peer, broker, rate, mode, workdir, run_id, interval_ms, run)
        for run in range(1, runs + 1)
    ]
    good = [r for r in done if "error" not in r]
    result: dict[str, Any] = {"rate_words_per_s": rate, "interval_ms": interval_ms, "runs": done}
    result["producer"] = "bench/loadgen (JVM) and latency probes"
    if not good:
        result["error"] = f"no run of {runs} succeeded: {done[-1].get('error')}"
        return result
    for key in ("p50_ms", "p99_ms", "achieved_words_per_s"):
        values = [r[key] for r in good if r.get(key) is not None]
        if values:
            result[key] = round(statistics.median(values), 1)
            result[f"{key}_range"] = [min(values), max(values)]
    result["good_runs"] = len(good)
    return result


def latency_jvm(
    peer: Peer,
    broker: LocalBroker,
    rate: int,
    mode: Mode,
    workdir: Path,
    run_id: str,
    interval_ms: int,
    run: int,
) -> dict[str, Any]:
    """One run: the system up, the bulk at ``rate`` words/s and the probes for the warm-up and
    the measured seconds, then the output checked exact."""
    tag = f"jlat{rate}i{interval_ms}r{run}"
    job = Job(
        bootstrap=broker.bootstrap,
        name=f"bench-{peer.name}-{tag}-{run_id}",
        input_topic=f"{peer.name}.{tag}.input",
        output_topic=f"{peer.name}.{tag}.output",
        workdir=workdir / f"{peer.name}-latency-{tag}",
        interval_ms=interval_ms,
        parallelism=PARALLELISM,
    )
    for topic in (job.input_topic, job.output_topic):
        create_topic(job.bootstrap, topic, PARTITIONS)
    prefix = f"latprobe{run}x"
    watcher = OutputWatcher(job.bootstrap, job.output_topic, {}, True, time_prefix=prefix)
    watcher.start()
    say(f"{peer.name}: latency run {run} at {rate:,} words/s (JVM bulk), interval {interval_ms}")
    try:
        return _run(peer, broker, job, watcher, prefix, rate, mode, run)
    finally:
        watcher.close()


def _run(
    peer: Peer,
    broker: LocalBroker,
    job: Job,
    watcher: OutputWatcher,
    prefix: str,
    rate: int,
    mode: Mode,
    run: int,
) -> dict[str, Any]:
    result: dict[str, Any] = {"run": run, "rate_words_per_s": rate}
    running = peer.start(job)
    gen = LoadGenerator(job.bootstrap, job.input_topic, PARTITIONS, pool(), seed=run)
    probes = Probes(job.bootstrap, job.input_topic, prefix)
    try:
        # Ready = it processed and committed one line: the start-up is not latency.
        produce_all(job.bootstrap, job.input_topic, [READY_PROBE.encode()], PARTITIONS)
        wait_reading(lambda: READY_PROBE in watcher.current or not running.alive(), 120, watcher)
        if READY_PROBE not in watcher.current:
            raise RuntimeError("the system never processed the first line")
        gen.start()
        gen.set_rate(rate)
        probes.start()
        _on_rate(gen, time.time() + 30)
        measured_from = time.time() + mode.latency_warmup_s
        end = measured_from + mode.latency_s
        while time.time() < end and both_alive(running, broker) and gen.alive():
            time.sleep(0.2)
        probes.stop()
        expected = gen.stop()
        if probes.error is not None:
            raise RuntimeError(f"the probes failed: {probes.error}")
        for n in range(len(probes.sent_at)):
            expected[probes.word(n)] += 1
        expected[READY_PROBE] += 1
        exact = _wait_exact(watcher, dict(expected), running, broker, mode.timeout_s)
        result["verified_exact"] = exact
        if not exact:
            raise RuntimeError("the committed output is not exact")
        result |= _figures(probes, watcher, measured_from)
        result["achieved_words_per_s"] = round(gen.acked_words_per_s(measured_from, end) or 0)
        result["load_generator_max_behind_ms"] = gen.max_behind_ms(measured_from, end)
    except (TimeoutError, RuntimeError) as exc:
        result["error"] = str(exc)
        say(f"{peer.name}: latency run {run} FAILED: {exc}")
    finally:
        probes.stop()
        gen.close()
        running.stop()
    check_broker(broker)
    return result


def _on_rate(gen: LoadGenerator, until: float) -> None:
    """Until the generator's last second kept up with its rate (a JVM starting is behind
    for a second or two, then catches up above the rate) or ``until``."""
    while time.time() < until and gen.alive():
        if gen.status and gen.status[-1].behind_ms <= ON_RATE_MS:
            return
        time.sleep(0.1)


def pool() -> list[str]:
    return list(corpus.lines(POOL_LINES, seed=3))


def _wait_exact(
    watcher: OutputWatcher,
    expected: dict[str, int],
    running: Any,
    broker: LocalBroker,
    timeout: float,
) -> bool:
    """Until the committed output holds ``expected`` (and only words of it, each count only
    rising), the system or the broker gone, or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = dict(watcher.current)
        if all(current.get(w) == n for w, n in expected.items()):
            return len(current) == len(expected) and not watcher.not_increasing
        if watcher.error is not None or not both_alive(running, broker):
            return False
        time.sleep(0.5)
    return False


def _figures(probes: Probes, watcher: OutputWatcher, measured_from: float) -> dict[str, Any]:
    """The probes sent after the warm-up: latency percentiles (ms)."""
    latencies = []
    for n, sent in enumerate(probes.sent_at):
        seen = watcher.seen.get(probes.word(n))
        if sent >= measured_from and seen is not None:
            latencies.append((seen[1][0] - sent) * 1000)
    if not latencies:
        raise RuntimeError("no probe was measured")
    return {
        "probes": len(latencies),
        "p50_ms": round(percentile(latencies, 50) or 0, 1),
        "p99_ms": round(percentile(latencies, 99) or 0, 1),
        "max_ms": round(max(latencies), 1),
    }
