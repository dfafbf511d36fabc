"""This project against Kafka Streams, Quix Streams and Flink: the same word count, same broker.

One local Kafka 4.4.0 broker (127.0.0.1:29092, controller 29093, data in a temp dir) serves
every system in turn. Each system gets its own copy of the same seeded Zipf corpus in
``<system>.input`` (4 partitions, produced before it starts: a full backlog), writes
``<system>.output``, commits every 1 s exactly-once, and runs with a parallelism of 2 (workers,
stream threads, processes). Its output is verified (read_committed, to the end: the last value
per word is the exact count, nothing unknown; for this project also strictly increasing)
before its figures count.

Phases: throughput and resources (every system), the steady state on a backlog (every row:
bench/steady.py), the balanced live capacity (every row with an output: bench/capacity.py;
quick mode only this project's, two short steps), latency at a fixed input rate (every system
that sustains it) and at half the balanced capacity (full mode), state-size scaling of this
project's checkpoints (bench/scaling.py), recovery after SIGKILL (this project, full mode
only: bench/recovery.py). The headline's words/s is the balanced live capacity where it ran.

    python bench/run.py --quick          # 300k words, 100k/1M keys, no recovery: ~9 minutes
    python bench/run.py                  # 4M words, 1M/10M keys, recovery: ~10-15 minutes
    python bench/run.py --systems processor --words 1000000 --no-latency
    python bench/run.py --quick --results-dir /tmp/bench     # CI: leaves bench/results alone
    python bench/run.py --render bench/results/<timestamp>.json   # latest.md/.png from a result

Writes <results-dir>/<timestamp>.json and .png (the figure, bench/plot.py), latest.md and
latest.png (default results dir: bench/results); progress goes to stderr, and the last line on
stdout is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import capacity, loadgen  # noqa: E402
from bench.common import own_cpu_s as _own_cpu_s  # noqa: E402
from bench.common import say  # noqa: E402
from bench.measure import (  # noqa: E402
    OutputWatcher,
    ProcessSampler,
    RateProducer,
    create_topic,
    exact_counts,
    latency_percentiles,
    log_anomalies,
    machine_busy_s,
    process_cpu_s,
    produce_all,
    rates,
)
from bench.peers.base import Job, Peer, Running  # noqa: E402
from bench.peers.ceiling_peer import CeilingPeer  # noqa: E402
from bench.peers.flink_peer import FlinkPeer  # noqa: E402
from bench.peers.flink_sql_peer import FlinkSqlPeer  # noqa: E402
from bench.peers.kstreams_peer import KafkaStreamsPeer, KafkaStreamsPreAggPeer  # noqa: E402
from bench.peers.processor_peer import (  # noqa: E402
    ProcessorPeer,
    blocked_in_checkpoints,
    checkpoint_markers,
    checkpoint_stats,
    checkpoint_summary,
    completed_checkpoints,
    pipeline_breakdown,
)
from bench.peers.quix_peer import QuixPeer  # noqa: E402
from bench.scaling import state_scaling  # noqa: E402
from bench.steady import (  # noqa: E402
    SteadyMode,
    consumer_perf_test,
    produce_input,
    spread,
    steady_run,
    tools_classpath,
)
from bench.venvs import cached_venv  # noqa: E402
from processor.commands import corpus  # noqa: E402
from processor.kafka.broker import LocalBroker  # noqa: E402

PORT = 29092
CONTROLLER_PORT = 29093
PARTITIONS = 4
INTERVAL_MS = 1000
PARALLELISM = 2
PEERS: dict[str, type[Peer]] = {
    "processor": ProcessorPeer,
    "kafka_streams": KafkaStreamsPeer,
    "quix": QuixPeer,
    "flink": FlinkPeer,
}
RESULTS = Path(__file__).resolve().parent / "results"
EMIT_RECORD = Path(__file__).resolve().parent / "wordcount_emit_record.py"


@dataclass(frozen=True)
class Mode:
    name: str
    words: int
    latency_rates: tuple[int, ...]  # words per second; the first one is the headline
    latency_warmup_s: float
    latency_s: float
    recovery_words: int  # 0: no recovery phase
    timeout_s: float  # for one system to reach the exact output
    scaling_keys: tuple[int, ...]  # state sizes of the state-scaling phase (distinct keys)
    scaling_trickle_s: float  # steady state measured after each state is built
    # Checkpoint/commit intervals of the latency phase, and whether each system also runs at
    # half its steady-state median (a backlog's rate, not one it sustains live with a
    # producer beside it: bench/sustainable.py searches for that one).
    latency_intervals: tuple[int, ...] = (INTERVAL_MS,)
    latency_half_max: bool = False


QUICK = Mode("quick", 300_000, (20_000, 5_000), 3.0, 10.0, 0, 240.0, (100_000, 1_000_000), 10.0)
FULL = Mode(
    "full",
    4_000_000,
    (20_000,),
    5.0,
    30.0,
    2_000_000,
    1200.0,
    (1_000_000, 10_000_000),
    20.0,
    latency_intervals=(100, 250, 500, 1000),
    latency_half_max=True,
)
# What one Python RateProducer line loop sends at most here, shared with the system: a half
# rate above it is capped (the result says so, and gives the rate achieved).
MAX_LATENCY_RATE = 500_000
# The steady-state phase (bench/steady.py): the shared input's size, warm-up, window, runs per
# row. Quick (CI): one short run per row, only to show that every row works end to end.
QUICK_STEADY = SteadyMode(words=30_000_000, warmup_s=5.0, window_s=10.0, reps=1, pool_words=300_000)
# The backlog is the secondary figure since #29 (the balanced live capacity is the headline):
# a 30 s window, so that the full run's phases fit in a sitting.
FULL_STEADY = SteadyMode(words=320_000_000, warmup_s=10.0, window_s=30.0, reps=5)


@dataclass(frozen=True)
class Row:
    """One row of the steady-state phase: a peer at a configuration."""

    key: str  # in the report
    peer: Peer
    interval_ms: int
    note: str = ""


def steady_rows(names: Sequence[str]) -> list[Row]:
    """Every chosen system at the common settings, the variants the comparison needs next to
    them, and the ceiling. A peer added to PEERS gets its row with nothing more to do."""
    rows = [Row(n, PEERS[n](), INTERVAL_MS) for n in names]
    if "kafka_streams" in names:
        rows.append(
            Row(
                "kafka_streams_commit_100ms",
                KafkaStreamsPeer(),
                100,
                "commit.interval.ms=100, Kafka Streams' default under exactly-once",
            )
        )
        rows.append(
            Row(
                "kafka_streams_preagg",
                KafkaStreamsPreAggPeer(),
                INTERVAL_MS,
                "a combiner before the repartition: per-task partial sums in a cached, logged "
                "store, forwarded at each commit-interval punctuation (processor's combiner)",
            )
        )
    if "flink" in names:
        rows.append(
            Row(
                "flink_sql",
                FlinkSqlPeer(),
                INTERVAL_MS,
                "Flink SQL: mini-batch (allow-latency = the interval, size 100,000), TWO_PHASE "
                "local-global COUNT, upsert-kafka exactly-once: the combiner's counterpart",
            )
        )
    if "processor" in names:
        rows.append(
            Row(
                "processor_at_least_once",
                ProcessorPeer(env={"PROCESSOR_GUARANTEE": "at_least_once"}),
                INTERVAL_MS,
                "PROCESSOR_GUARANTEE=at_least_once: no alignment, no transactions",
            )
        )
        rows.append(
            Row(
                "processor_no_combiner",
                ProcessorPeer(env={"PROCESSOR_COMBINE": "false"}),
                INTERVAL_MS,
                "PROCESSOR_COMBINE=false: every word through the shuffle, as in the peers",
            )
        )
        rows.append(
            Row(
                "processor_emit_record",
                ProcessorPeer(pipeline=f"{EMIT_RECORD}:pipeline"),
                INTERVAL_MS,
                'count(emit="record"): no combining, one output record per input word, '
                "as the peers' per-word updates",
            )
        )
    rows.append(Row("ceiling", CeilingPeer(), INTERVAL_MS, "no state, no output"))
    rows.append(
        Row(
            "ceiling_uncombined",
            CeilingPeer(forward_every_word=True),
            INTERVAL_MS,
            "the ceiling's readers also produce every word to a shuffle topic, non-transactionally",
        )
    )
    return rows


# matplotlib draws the figure; never a dependency of the project (see plot_python).
MATPLOTLIB = "3.10.8"
MATPLOTLIB_VENV = Path.home() / ".cache" / "processor" / f"bench-matplotlib-{MATPLOTLIB}"
PLOT = Path(__file__).resolve().parent / "plot.py"


# ------------------------------------------------------------------------------ phases


def throughput(
    peer: Peer,
    broker: LocalBroker,
    lines: Sequence[bytes],
    expected: dict[str, int],
    workdir: Path,
    run_id: str,
    timeout: float,
    on_start: Callable[[Running], object] | None = None,
) -> dict[str, Any]:
    """A full backlog, then the system: how fast the exact result is committed, at what cost.
    ``on_start`` is called right after the system started (bench/experiments/profile_workers.py)."""
    name, bootstrap = peer.name, broker.bootstrap
    words = sum(expected.values())
    job = Job(
        bootstrap=bootstrap,
        name=f"bench-{name}-{run_id}",
        input_topic=f"{name}.input",
        output_topic=f"{name}.output",
        workdir=workdir / name,
        interval_ms=INTERVAL_MS,
        parallelism=PARALLELISM,
        until_idle=isinstance(peer, ProcessorPeer),
    )
    say(f"{name}: producing {words:,} words ({len(lines):,} lines) into {job.input_topic}")
    create_topic(bootstrap, job.input_topic, PARTITIONS)
    create_topic(bootstrap, job.output_topic, PARTITIONS)
    produce_all(bootstrap, job.input_topic, lines, PARTITIONS)

    watcher = OutputWatcher(bootstrap, job.output_topic, expected)
    watcher.start()
    try:
        return _throughput(peer, job, watcher, broker, words, len(lines), timeout, on_start)
    finally:
        watcher.close()


def _throughput(
    peer: Peer,
    job: Job,
    watcher: OutputWatcher,
    broker: LocalBroker,
    words: int,
    lines: int,
    timeout: float,
    on_start: Callable[[Running], object] | None = None,
    also: Sequence[OutputWatcher] = (),
) -> dict[str, Any]:
    """``also``: more output topics that must be exact too (a pipeline with more than one
    sink, bench/compare.py); the window ends when the last of them is."""
    name, bootstrap = peer.name, job.bootstrap
    broker_pid = int(broker.pid_file.read_text().strip())
    broker_log_offset = broker.log_file.stat().st_size
    broker_cpu_before = process_cpu_s(broker_pid)
    bench_cpu_before = _own_cpu_s()
    machine_before = machine_busy_s()
    say(f"{name}: starting ({peer.title})")
    running = peer.start(job)
    sampler = ProcessSampler(running.roots)
    sampler.start()
    result: dict[str, Any] = {"system": peer.title, "settings": peer.settings()}
    error: str | None = None
    exact_at = exited_at = None
    cpu_at_exact = broker_cpu = bench_cpu = machine_cpu = 0.0
    try:
        if on_start is not None:
            on_start(running)
        exact_at = watcher.wait_exact(timeout, alive=lambda: _both_alive(running, broker))
        for other in also:
            exact_at = max(
                exact_at, other.wait_exact(timeout, alive=lambda: _both_alive(running, broker))
            )
        cpu_at_exact = sampler.sample()
        broker_cpu = process_cpu_s(broker_pid) - broker_cpu_before
        bench_cpu = _own_cpu_s() - bench_cpu_before
        machine_cpu = machine_busy_s() - machine_before
        say(f"{name}: output exact after {exact_at - running.started_at:.1f}s")
        if job.until_idle:
            if running.wait(120):
                exited_at = time.time()
            else:
                error = "did not exit by itself (--until-idle) within 120 s of the exact output"
    except (TimeoutError, RuntimeError) as exc:
        error = str(exc)
    finally:
        killed = running.stop()
        sampler.stop()
    _check_broker(broker)
    verdict = watcher.finish()
    first = peer.first_consumed_at(running)
    # Without its marker (a changed log line, say) the window starts at the process start:
    # the figure is then lower than it should be, never higher, and the report says so.
    result["window_starts_at"] = "first input consumed" if first else "process start"
    first = first or running.started_at
    result["exit_codes"] = running.exit_codes()
    result["killed_at_stop"] = len(killed)
    result["verification"] = {
        "exact": verdict.exact,
        "output_records": verdict.records,
        "words": verdict.words,
        "wrong_final": verdict.wrong_final,
        "missing_words": verdict.missing_words,
        "unknown_words": verdict.unknown_words,
        "not_increasing_updates": verdict.not_increasing,
        "examples": verdict.examples,
    }
    others = {other.topic: other.finish() for other in also}
    result["verification_also"] = {
        topic: {"exact": v.exact, "output_records": v.records, "examples": v.examples}
        for topic, v in others.items()
    }
    ok = error is None and verdict.exact and exact_at is not None
    ok = ok and all(v.exact for v in others.values())
    if isinstance(peer, ProcessorPeer) and verdict.not_increasing:
        ok = False
        error = f"{verdict.not_increasing} updates not strictly increasing"
    result["ok"] = ok
    result["error"] = error
    result["resources"] = sampler.report()
    result["log_anomalies"] = {
        "system": log_anomalies(running.log_text()),
        "broker": log_anomalies(_read_from(broker.log_file, broker_log_offset)),
    }
    if not ok or exact_at is None:
        say(
            f"{name}: FAILED: {error}; exit codes {result['exit_codes']}; "
            f"verdict {result['verification']}; logs in {job.workdir}"
        )
        return result
    processing_s = exact_at - first
    cpu_processing = cpu_at_exact - sampler.cpu_at(first)
    result.update(
        {
            "words": words,
            "lines": lines,
            "startup_s": round(first - running.started_at, 3),
            "processing_s": round(processing_s, 3),
            "words_per_s": round(words / processing_s),
            "words_per_s_incl_startup": round(words / (exact_at - running.started_at)),
            "first_output_after_s": (
                round(watcher.first_output_at - first, 3) if watcher.first_output_at else None
            ),
            "cpu_s_processing": round(cpu_processing, 2),
            "cpu_s_per_million_words": round(cpu_processing / (words / 1e6), 2),
            "cpu_s_until_exact_incl_startup": round(cpu_at_exact, 2),
            "broker_cpu_s_until_exact": round(broker_cpu, 2),
            # Everything else on the machine from start to exact (other engineers' test
            # suites, say): the measure of how noisy this run's CPU-bound figures are.
            "other_cpu_s_until_exact": round(
                machine_cpu - cpu_at_exact - broker_cpu - bench_cpu, 2
            ),
            "bench_cpu_s_until_exact": round(bench_cpu, 2),
            "machine_busy_pct_until_exact": round(
                100 * machine_cpu / ((os.cpu_count() or 1) * (exact_at - running.started_at)), 1
            ),
            "exit_after_exact_s": round(exited_at - exact_at, 3) if exited_at else None,
        }
    )
    result["timeline"] = {"t0": round(first, 3), "rates": rates(watcher.progress, first)}
    if isinstance(peer, ProcessorPeer):
        result["checkpoints"] = checkpoint_stats(running)
        result["checkpoint_blocking"] = blocked_in_checkpoints(
            bootstrap, job.name, first, exact_at, cpu_processing
        )
        history = completed_checkpoints(bootstrap, job.name)
        # Checkpoints triggered after the first record was consumed and completed by the time
        # the output was exact: the ones that carried the backlog.
        result["checkpoint_summary"] = checkpoint_summary(history, first, exact_at)
        result["checkpoint_summary_all"] = checkpoint_summary(history)
        result["timeline"]["checkpoints"] = [
            {
                "id": c["id"],
                "triggered_at": round(c["triggered_at"] - first, 3),
                "completed_at": round(c["completed_at"] - first, 3),
            }
            for c in checkpoint_markers(history)
        ]
    say(
        f"{name}: {result['words_per_s']:,} words/s, startup {result['startup_s']}s, "
        f"{result['cpu_s_per_million_words']} CPU s/M words, peak RSS "
        f"{result['resources']['peak_rss_mb_sum_of_process_peaks']} MB, "
        f"{verdict.records:,} output records verified"
    )
    return result


def latency(
    peer: Peer,
    broker: LocalBroker,
    rate: int,
    mode: Mode,
    workdir: Path,
    run_id: str,
    seed: int = 7,
    on_ready: Callable[[Running], object] | None = None,
    interval_ms: int = INTERVAL_MS,
    tag_suffix: str = "",
) -> dict[str, Any]:
    """Input at a fixed rate; per line, the time until every word of it shows a count that
    includes it in the committed output. ``on_ready`` is called once the system is up, right
    before the input starts (bench/experiments/profile_workers.py attaches py-spy there);
    ``tag_suffix`` tells the topics of two runs at the same rate and interval apart."""
    name, bootstrap = peer.name, broker.bootstrap
    tag = f"lat{rate}" if interval_ms == INTERVAL_MS else f"lat{rate}i{interval_ms}"
    tag += tag_suffix
    job = Job(
        bootstrap=bootstrap,
        name=f"bench-{name}-{tag}-{run_id}",
        input_topic=f"{name}.{tag}.input",
        output_topic=f"{name}.{tag}.output",
        workdir=workdir / f"{name}-latency-{tag}",
        interval_ms=interval_ms,
        parallelism=PARALLELISM,
    )
    probe = "benchprobe"
    total = int(rate * (mode.latency_warmup_s + mode.latency_s))
    lines = list(corpus.lines(total, seed=seed))
    expected = dict(exact_counts([probe, *lines]))
    create_topic(bootstrap, job.input_topic, PARTITIONS)
    create_topic(bootstrap, job.output_topic, PARTITIONS)
    watcher = OutputWatcher(bootstrap, job.output_topic, expected, record_times=True)
    watcher.start()
    try:
        return _latency(peer, broker, job, watcher, lines, probe, rate, mode, on_ready)
    finally:
        watcher.close()


def _latency(
    peer: Peer,
    broker: LocalBroker,
    job: Job,
    watcher: OutputWatcher,
    lines: list[str],
    probe: str,
    rate: int,
    mode: Mode,
    on_ready: Callable[[Running], object] | None = None,
) -> dict[str, Any]:
    name, bootstrap = peer.name, job.bootstrap
    say(
        f"{name}: latency at {rate:,} words/s for {mode.latency_s:.0f}s, "
        f"interval {job.interval_ms} ms"
    )
    running = peer.start(job)
    producer = RateProducer(bootstrap, job.input_topic, lines, rate, PARTITIONS)
    result: dict[str, Any] = {"rate_words_per_s": rate, "interval_ms": job.interval_ms}
    try:
        # Ready = it processed and committed one line: the start-up is not latency.
        produce_all(bootstrap, job.input_topic, [probe.encode()], PARTITIONS)
        _wait(lambda: probe in watcher.current or not _both_alive(running, broker), 120, watcher)
        if probe not in watcher.current:
            raise RuntimeError("the system never processed the probe line")
        if on_ready is not None:
            on_ready(running)
        started = time.time()
        producer.start()
        producer.join(mode.latency_warmup_s + mode.latency_s + 120)
        if producer.error is not None:
            raise RuntimeError(f"the rate producer failed: {producer.error}")
        watcher.wait_exact(120, alive=lambda: _both_alive(running, broker))
    except (TimeoutError, RuntimeError) as exc:
        result["error"] = str(exc)
    finally:
        running.stop()
    _check_broker(broker)
    verdict = watcher.finish()
    result["verified_exact"] = verdict.exact
    result["producer_max_behind_s"] = round(producer.max_behind_s, 3)
    if "error" in result or not verdict.exact:
        result.setdefault("error", f"output not exact: {verdict.examples}")
        say(f"{name}: latency FAILED: {result['error']}")
        return result
    figures = latency_percentiles(
        lines, producer.sent_at, watcher.seen, skip_before=started + mode.latency_warmup_s
    )
    result.update(figures)
    sent = producer.sent_at
    if len(sent) > 1 and sent[-1] > sent[0]:
        result["achieved_words_per_s"] = round(rate * mode_span(mode) / (sent[-1] - sent[0]))
    if isinstance(peer, ProcessorPeer):
        # The measured window: after the warm-up, until the last line was sent.
        window = (started + mode.latency_warmup_s, producer.sent_at[-1])
        result["checkpoints"] = checkpoint_summary(
            completed_checkpoints(bootstrap, job.name), *window
        )
        result["pipeline_ms"] = pipeline_breakdown(bootstrap, job.name, *window)
    say(f"{name}: latency p50 {figures.get('p50_ms')} ms, p99 {figures.get('p99_ms')} ms")
    return result


def mode_span(mode: Mode) -> float:
    """Seconds the rate producer is meant to take (warm-up and measured part)."""
    return mode.latency_warmup_s + mode.latency_s


def latency_phase(
    peers: Sequence[Peer],
    broker: LocalBroker,
    mode: Mode,
    report: dict[str, Any],
    workdir: Path,
    run_id: str,
) -> dict[str, dict[str, dict[str, Any]]]:
    """interval ms -> rate ("20000", or "half_max") -> system -> latency result: every
    system at each fixed rate it sustains and each checkpoint/commit interval, and (full
    mode) at half its own highest sustainable rate, the steady-state median."""
    steady = (report.get("steady") or {}).get("rows", {})
    live = (report.get("capacity") or {}).get("rows", {})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for interval in mode.latency_intervals:
        by_rate = out.setdefault(str(interval), {})
        for peer in peers:
            # Half the balanced live capacity where it was measured (the target's point),
            # else half the backlog's median.
            capacity_median = ((live.get(peer.name) or {}).get("summary") or {}).get("words_per_s")
            backlog_median = (steady.get(peer.name) or {}).get("words_per_s", {}).get("median")
            median = capacity_median or backlog_median
            # Whether a fixed rate is worth measuring: the backlog's figure (quick mode's
            # capacity is two short steps, not a capacity).
            sustained = (
                backlog_median or report["systems"].get(peer.name, {}).get("words_per_s") or 0
            )
            rates = [(str(r), r) for r in mode.latency_rates]
            if mode.latency_half_max and median:
                rates.append(("half_max", min(MAX_LATENCY_RATE, int(round(median / 2, -3)))))
            for key, rate in rates:
                at = by_rate.setdefault(key, {})
                if key != "half_max" and sustained < 1.5 * rate:
                    at[peer.name] = {
                        "rate_words_per_s": rate,
                        "interval_ms": interval,
                        "skipped": f"throughput {sustained:,} words/s is below 1.5 x the rate",
                    }
                    say(f"{peer.name}: no latency at {rate:,} words/s (saturated)")
                    continue
                try:
                    at[peer.name] = latency(
                        peer, broker, rate, mode, workdir, run_id, interval_ms=interval
                    )
                except BrokerDied:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    traceback.print_exc()
                    at[peer.name] = {"rate_words_per_s": rate, "error": repr(exc)}
                if key == "half_max":
                    at[peer.name]["half_of_words_per_s"] = median
                    at[peer.name]["half_of"] = (
                        "balanced live capacity" if capacity_median else "backlog median"
                    )
                    at[peer.name]["capped"] = rate < round(median / 2, -3)
    return out


def steady_state(
    rows: Sequence[Row],
    broker: LocalBroker,
    steady: SteadyMode,
    workdir: Path,
    run_id: str,
    seed: int,
) -> dict[str, Any]:
    """Every row ``steady.reps`` times in a random order (seeded), each on the shared input
    under a fresh group with fresh topics, plus kafka-consumer-perf-test as often."""
    bootstrap = broker.bootstrap
    say(f"steady state: producing {steady.words:,} words into the shared input topic")
    started = time.time()
    source = produce_input(bootstrap, steady.words, PARTITIONS, steady.pool_words)
    say(f"steady state: input ready in {time.time() - started:.0f}s ({source.lines:,} lines)")
    classpath = tools_classpath(broker)
    order = [(row.key, rep) for rep in range(steady.reps) for row in rows]
    random.Random(seed).shuffle(order)
    perf_slots = [("consumer_perf_test", rep) for rep in range(steady.reps)]
    for slot in perf_slots:  # interleaved with the rest, also at random
        order.insert(random.Random(f"{seed}-{slot[1]}").randrange(len(order) + 1), slot)
    by_key = {row.key: row for row in rows}
    out: dict[str, Any] = {
        "method": "slope of the committed input offsets over the window (bench/steady.py)",
        "mode": dataclasses.asdict(steady),
        "seed": seed,
        "order": [f"{k}#{r}" for k, r in order],
        "input": source.describe(),
        "rows": {
            row.key: {
                "system": row.peer.title,
                "peer": row.peer.name,
                "note": row.note,
                "interval_ms": row.interval_ms,
                "settings": row.peer.settings(),
                "runs": [],
            }
            for row in rows
        },
        "consumer_perf_test": {"runs": []},
    }
    for i, (key, rep) in enumerate(order):
        say(f"steady state {i + 1}/{len(order)}: {key} run {rep + 1}/{steady.reps}")
        if key == "consumer_perf_test":
            result = consumer_perf_test(broker, source, f"perf-{run_id}-{rep}", classpath)
            say(f"consumer_perf_test: {result.get('records_per_s') or result.get('error')}")
            out["consumer_perf_test"]["runs"].append(result)
            continue
        row = by_key[key]
        job = Job(
            bootstrap=bootstrap,
            name=f"steady-{key}-{run_id}-{rep}",
            input_topic=source.topic,
            output_topic=f"steady-{key}-{rep}.output",
            workdir=workdir / f"steady-{key}-{rep}",
            interval_ms=row.interval_ms,
            parallelism=PARALLELISM,
        )
        extra = _processor_steady_extra if isinstance(row.peer, ProcessorPeer) else None
        try:
            result = steady_run(row.peer, job, broker, source, steady, say, extra)
        except BrokerDied:
            raise
        except Exception as exc:  # noqa: BLE001 - one run's crash is its result
            traceback.print_exc()
            result = {"job": job.name, "ok": False, "error": repr(exc)}
        _check_broker(broker)
        out["rows"][key]["runs"].append(result)
    _summarize_steady(out)
    return out


# Variants that answer other questions (what exactly-once costs; Kafka Streams' default
# interval) on the backlog: the live capacity is for the comparison's rows.
NOT_IN_CAPACITY = ("processor_at_least_once", "kafka_streams_commit_100ms")
# Rows that differ from another row by one setting: quick mode (CI, which shows that every
# row works end to end) leaves them out of the steady state. Those settings are tested on
# their own: at-least-once in tests/integration/test_guarantees.py, the uncombined shuffle in
# tests/unit/test_chain.py, a commit interval everywhere.
SETTING_ONLY = (*NOT_IN_CAPACITY, "processor_no_combiner")


def capacity_rows(names: Sequence[str]) -> list[Row]:
    return [r for r in steady_rows(names) if r.peer.has_output and r.key not in NOT_IN_CAPACITY]


def capacity_phase(
    names: Sequence[str],
    broker: LocalBroker,
    reps: int,
    workdir: Path,
    run_id: str,
    quick: bool,
    seed: int,
) -> dict[str, Any]:
    """Every row with an output (bench/capacity.py), ``reps`` times; quick mode (CI) runs
    only this project's row, two short steps, to show that the ladder and its check work."""
    rows = capacity_rows(names)
    if quick:
        rows = [r for r in rows if r.key == "processor"]
    return capacity.run_rows(rows, broker, reps, workdir, run_id, say, quick=quick, seed=seed)


def _processor_steady_extra(job: Job, start: float, end: float) -> dict[str, Any]:
    """This project's checkpoints in the window: duration and per-phase p50 / p99."""
    history = completed_checkpoints(job.bootstrap, job.name)
    return {"checkpoints": checkpoint_summary(history, start, end)}


def _summarize_steady(out: dict[str, Any]) -> None:
    perf = [r["records_per_s"] for r in out["consumer_perf_test"]["runs"] if r.get("ok")]
    perf_words = [r["words_per_s"] for r in out["consumer_perf_test"]["runs"] if r.get("ok")]
    out["consumer_perf_test"]["records_per_s"] = spread(perf)
    out["consumer_perf_test"]["words_per_s"] = spread(perf_words)
    ceiling = ceiling_cpu = None
    if "ceiling" in out["rows"]:
        runs = [r for r in out["rows"]["ceiling"]["runs"] if r.get("ok")]
        ceiling = statistics.median([r["words_per_s"] for r in runs]) if runs else None
        ceiling_cpu = _median([r["cpu_s_per_million_words"] for r in runs])
    for row in out["rows"].values():
        good = [r for r in row["runs"] if r.get("ok")]
        row["ok_runs"] = len(good)
        row["words_per_s"] = spread([r["words_per_s"] for r in good])
        row["input_words_per_s"] = spread([r["input_words_per_s"] for r in good])
        outputs = [r["output_offsets_per_s"] for r in good if r["output_offsets_per_s"] is not None]
        row["output_offsets_per_s"] = spread(outputs)
        row["bench_cpu_cores"] = _median([r["bench_cpu_cores"] for r in good])
        row["bench_cpu_share"] = _median([r["bench_cpu_share"] for r in good])
        row["cpu_s_per_million_words"] = _median([r["cpu_s_per_million_words"] for r in good])
        row["broker_cpu_s_per_million_words"] = _median(
            [r["broker_cpu_s_per_million_words"] for r in good]
        )
        row["machine_busy_pct"] = _median([r["machine_busy_pct"] for r in good])
        row["window_s"] = _median([r["window_s"] for r in good])
        median = row["words_per_s"]["median"]
        row["ceiling_pct"] = (
            round(100 * median / ceiling, 1) if median is not None and ceiling else None
        )
        # The same share by CPU: the ceiling's CPU per word over the row's. On a machine
        # whose cores other processes also want, words/s depends on how much CPU a system
        # wins against them (more runnable threads win more); CPU per word does not.
        cpu = row["cpu_s_per_million_words"]
        row["ceiling_cpu_pct"] = round(100 * ceiling_cpu / cpu, 1) if cpu and ceiling_cpu else None
        work_keys = [
            k for k in (good[0].get("work", {}) if good else {}) if k.endswith("_per_m_words")
        ]
        row["work_per_m_words"] = {
            k.removesuffix("_per_m_words"): _median([r["work"][k] for r in good]) for k in work_keys
        }
        if any("checkpoints" in r for r in good):
            row["checkpoint_duration_ms_p50"] = _median(
                [r["checkpoints"].get("duration_ms_p50") for r in good if "checkpoints" in r]
            )
            row["checkpoint_duration_ms_p99"] = _median(
                [r["checkpoints"].get("duration_ms_p99") for r in good if "checkpoints" in r]
            )
    rows = out["rows"]
    eos = (rows.get("processor") or {}).get("words_per_s", {}).get("median")
    alo = (rows.get("processor_at_least_once") or {}).get("words_per_s", {}).get("median")
    # What exactly-once costs in throughput: the share of the at-least-once rate it loses.
    out["eos_overhead_pct"] = round(100 * (1 - eos / alo), 1) if eos and alo else None
    # The same in CPU per word, steadier on a loaded machine: how much more CPU a word costs
    # exactly-once.
    eos_cpu = (rows.get("processor") or {}).get("cpu_s_per_million_words")
    alo_cpu = (rows.get("processor_at_least_once") or {}).get("cpu_s_per_million_words")
    out["eos_overhead_cpu_pct"] = (
        round(100 * (eos_cpu / alo_cpu - 1), 1) if eos_cpu and alo_cpu else None
    )


def _median(values: Sequence[Any]) -> Any:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(statistics.median(numbers), 3) if numbers else None


class BrokerDied(RuntimeError):
    """The benchmark's broker is gone: no later figure could mean anything."""


def _check_broker(broker: LocalBroker) -> None:
    if broker.status() is None:
        raise BrokerDied(
            f"the broker on {broker.bootstrap} died during the run (see {broker.log_file}); "
            "was it killed from outside the bench?"
        )


def _both_alive(running: Running, broker: LocalBroker) -> bool:
    return running.alive() and broker.status() is not None


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def _wait(predicate: Any, timeout: float, watcher: OutputWatcher) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        if watcher.error is not None:
            raise RuntimeError(f"reading the output failed: {watcher.error}")
        time.sleep(0.05)


def recovery(bootstrap: str, words: int) -> dict[str, Any]:
    from bench.recovery import measure_run

    say(f"processor: recovery after SIGKILL of a worker (bench/recovery.py, {words:,} words)")
    try:
        measured = measure_run(bootstrap, words, kills=1, restart=True)
    except (AssertionError, RuntimeError, TimeoutError) as exc:
        say(f"processor: recovery FAILED: {exc}")
        return {"error": str(exc), "recovery_s": None}
    times = measured["times"]
    say(f"processor: recovered in {times[0]:.2f}s")
    return {
        "recovery_s": round(statistics.median(times), 3),
        "all_s": [round(t, 3) for t in times],
        "timeline": measured["timeline"],
    }


def scaling(bootstrap: str, mode: Mode, workdir: Path, run_id: str) -> dict[str, Any]:
    """Checkpoint duration and size against the state size (bench/scaling.py)."""
    out: dict[str, Any] = {}
    for keys in mode.scaling_keys:
        try:
            out[str(keys)] = state_scaling(
                bootstrap,
                keys,
                workdir,
                run_id,
                partitions=PARTITIONS,
                interval_ms=INTERVAL_MS,
                parallelism=PARALLELISM,
                trickle_s=mode.scaling_trickle_s,
                say=say,
            )
        except BrokerDied:
            raise
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            traceback.print_exc()
            out[str(keys)] = {"keys": keys, "error": repr(exc)}
    return out


# ------------------------------------------------------------------------------ plot


def plot_python() -> str:
    """An interpreter that can import matplotlib: this one if it can, else a virtualenv of the
    bench's own (created on first use), so that the project's environment stays as it is."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is not None:
        return sys.executable
    python = MATPLOTLIB_VENV / "bin" / "python"
    if not python.exists():
        say(
            f"matplotlib is not installed in {sys.prefix}: installing matplotlib=={MATPLOTLIB} "
            f"into {MATPLOTLIB_VENV} for the figure (once; the project's environment is not "
            "touched)"
        )
    return str(cached_venv(MATPLOTLIB_VENV, f"matplotlib=={MATPLOTLIB}", "import matplotlib"))


def write_plot(python: str, source: Path, out: Path) -> None:
    done = subprocess.run(
        [python, str(PLOT), str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"bench/plot.py failed: {' | '.join(tail)}")


# ------------------------------------------------------------------------------ report


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        text = f"{value:,.{digits}f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.,") else text
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return "-"
    return f"{a / b:.2f}x"


def _rss(result: dict[str, Any]) -> Any:
    return result.get("resources", {}).get("peak_rss_mb_sum_of_process_peaks")


def markdown(report: dict[str, Any]) -> str:
    systems: dict[str, Any] = report["systems"]
    rates = report["mode"]["latency_rates"]
    lat: dict[str, Any] = report["latency"].get(str(rates[0]), {}) if rates else {}
    m = report["mode"]
    out = [
        f"# Benchmark {report['timestamp']} ({m['name']} mode)",
        "",
        f"{m['words']:,} words ({report['corpus']['lines']:,} lines, Zipf vocabulary "
        f"{report['corpus']['distinct_words']:,} words) per system; one local Kafka 4.4.0 "
        f"broker; {PARTITIONS} input partitions; commit/checkpoint every {INTERVAL_MS} ms; "
        f"parallelism {PARALLELISM}; exactly-once everywhere; {report['machine']}.",
        "",
        *([f"**Aborted:** {report['aborted']}", ""] if report.get("aborted") else []),
        "| system | verified | words/s | words/s incl. startup | startup s | CPU s / M words "
        "| broker CPU s | others' CPU s | peak RSS MB (Σ process peaks) | output records "
        f"| latency p50 / p99 ms at {rates[0] if rates else 0:,} words/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in systems.items():
        lr = lat.get(name, {})
        latency_cell = (
            f"{_fmt(lr.get('p50_ms'))} / {_fmt(lr.get('p99_ms'))}" if "p99_ms" in lr else "-"
        )
        out.append(
            f"| {r['system']} | {'yes' if r['ok'] else 'NO: ' + str(r.get('error'))} "
            f"| {_fmt(r.get('words_per_s'))} | {_fmt(r.get('words_per_s_incl_startup'))} "
            f"| {_fmt(r.get('startup_s'), 2)} | {_fmt(r.get('cpu_s_per_million_words'), 2)} "
            f"| {_fmt(r.get('broker_cpu_s_until_exact'), 1)} "
            f"| {_fmt(r.get('other_cpu_s_until_exact'), 1)} "
            f"| {_fmt(_rss(r))} "
            f"| {_fmt(r.get('verification', {}).get('output_records'))} | {latency_cell} |"
        )
    out += _capacity_table(report)
    out += _steady_tables(report)
    ours = systems.get("processor", {})
    out += [
        "",
        "Backlog phase (time to the exact output of a small backlog; start-up and pipeline "
        "delay weigh in):",
        "",
        "| ratio | words/s | CPU s / M words | peak RSS | latency p99 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    ours_lat = lat.get("processor", {})
    for peer in ("kafka_streams", "quix", "flink"):
        if peer not in systems:
            continue
        other = systems[peer]
        cells = [
            _ratio(ours.get(key), other.get(key))
            for key in ("words_per_s", "cpu_s_per_million_words")
        ]
        cells.append(_ratio(_rss(ours), _rss(other)))
        cells.append(_ratio(ours_lat.get("p99_ms"), lat.get(peer, {}).get("p99_ms")))
        out.append(f"| processor / {peer} | {' | '.join(cells)} |")
    if report["latency"]:
        out += [
            "",
            "| latency at a fixed input rate | p50 ms | p90 ms | p99 ms | max ms | lines |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for rate, by_system in report["latency"].items():
            for name, lr in by_system.items():
                label = f"{name} at {int(rate):,} words/s"
                if "p99_ms" not in lr:
                    why = lr.get("skipped") or lr.get("error")
                    out.append(f"| {label} | {why} | | | | |")
                    continue
                cells = [_fmt(lr.get(k), 1) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")]
                out.append(f"| {label} | {' | '.join(cells)} | {_fmt(lr.get('lines'))} |")
    out += _latency_sweep_table(report)
    head = report["headline"]
    blocking = report["systems"].get("processor", {}).get("checkpoint_blocking", {})
    out += [
        "",
        f"processor: recovery after SIGKILL {_fmt(head['processor']['recovery_s'], 2)} s; "
        f"checkpoint overhead {_fmt(head['checkpoint_overhead_pct'], 2)} % of the job's CPU "
        "(synchronous checkpoint steps, the epoch's output flush included; "
        f"{_fmt(blocking.get('cpu_pct_excl_output_flush'), 2)} % without it); task threads' "
        f"wall time in those steps {_fmt(blocking.get('blocked_pct'), 2)} %.",
        *_checkpoint_tables(report, rates),
        "",
        f"![throughput over time, checkpoints, recovery, state scaling]({report['timestamp']}.png)",
        "",
        "* words/s: input words / (first input record consumed -> every count exact in the "
        "committed output, seen by a read_committed reader). incl. startup: from process start.",
        "* CPU s / M words: CPU (user+sys) of the system's process tree between those two "
        "moments, per million input words. broker CPU s: the broker's, from the system's start "
        "to exact. others' CPU s: every other process on the machine in that time (other test "
        "suites): how noisy the row is.",
        "* peak RSS: sum over the system's processes of each one's VmHWM.",
        "* latency: per input line at a fixed rate, until all its words show counts that include "
        "it in the committed output; from the time the line was handed to the producer.",
        "* The machine has 2 cores shared by broker, system, the bench and whatever else runs "
        "(other test suites): CPU-bound figures are noisy.",
        "",
    ]
    return "\n".join(out)


def _latency_sweep_table(report: dict[str, Any]) -> list[str]:
    """p50 / p99 per system and rate against the checkpoint/commit interval."""
    sweep: dict[str, Any] = report.get("latency_by_interval") or {}
    intervals = sorted(sweep, key=int)
    if len(intervals) < 2:
        return []
    out = [
        "",
        "Latency against the checkpoint/commit interval (p50 / p99 ms per input line, at a "
        "fixed input rate; half max = half the system's steady-state median, the rate it "
        "achieved in brackets where the producer fell short):",
        "",
        "| system | rate words/s | " + " | ".join(f"{i} ms" for i in intervals) + " |",
        "| --- | ---: |" + " ---: |" * len(intervals),
    ]
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for interval in intervals:
        for key, by_system in sweep[interval].items():
            for name, r in by_system.items():
                row = cells.setdefault((name, key), {})
                if "p99_ms" in r:
                    row[interval] = f"{_fmt(r.get('p50_ms'))} / {_fmt(r.get('p99_ms'))}"
                    if row.get("rate") is None and key == "half_max":
                        row["rate"] = _fmt(r.get("rate_words_per_s"))
                        got = r.get("achieved_words_per_s") or 0
                        if got < 0.95 * r.get("rate_words_per_s", 0):
                            row["rate"] += f" ({_fmt(got)})"
                else:
                    row[interval] = "skipped" if "skipped" in r else "failed"
    for (name, key), row in cells.items():
        rate = f"half max {row.get('rate', '')}" if key == "half_max" else _fmt(int(key))
        out.append(f"| {name} | {rate} | " + " | ".join(row.get(i, "-") for i in intervals) + " |")
    out += ["", f"![latency against the interval]({report['timestamp']}-latency.png)"]
    return out


def _capacity_table(report: dict[str, Any]) -> list[str]:
    """The balanced live capacity per row (bench/capacity.py)."""
    cap = report.get("capacity")
    if not cap:
        return []
    kept = cap.get("mode", {}).get("kept_up_when", {})
    out = [
        "## Balanced live capacity (bench/capacity.py)",
        "",
        "The highest rate of a live producer (a JVM, bench/loadgen.py) at which the lag of "
        "every stage (input, repartition/shuffle) stayed flat over the window (growth <= "
        f"{kept.get('lag_growth_max_s_per_s')} s per s, median <= "
        f"{kept.get('lag_median_max_s')} s), with the output exact (read after the job "
        "stopped). Costs at that rate; checkpoints/min = transaction markers per output "
        "partition and transactional writer.",
        "",
        "| row | runs ok | words/s median | range | CPU s / M words | broker CPU s / M words "
        "| bench share | load generator share | checkpoints/min | producer-limited |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, row in cap["rows"].items():
        s = row.get("summary", {})
        rng = s.get("words_per_s_range")
        out.append(
            f"| {key} | {s.get('ok_runs')}/{s.get('runs')} | {_fmt(s.get('words_per_s'))} "
            f"| {_fmt(rng[0]) if rng else '-'} - {_fmt(rng[1]) if rng else '-'} "
            f"| {_fmt(s.get('cpu_s_per_m_words'), 3)} "
            f"| {_fmt(s.get('broker_cpu_s_per_m_words'), 3)} "
            f"| {_fmt(s.get('bench_cpu_share'), 4)} | {_fmt(s.get('loadgen_cpu_share'), 4)} "
            f"| {_fmt(s.get('checkpoints_per_min'), 1)} "
            f"| {'yes' if s.get('producer_limited') else 'no'} |"
        )
    return [*out, ""]


def _steady_tables(report: dict[str, Any]) -> list[str]:
    """The steady-state phase: throughput per row (median, range, share of the ceiling), the
    ceiling and kafka-consumer-perf-test, the work each system does per input word, and each
    row's configuration."""
    steady = report.get("steady")
    if not steady:
        return []
    m = steady["mode"]
    src = steady["input"]
    out = [
        "",
        f"## Steady state ({m['reps']} run(s) per row in random order; warm-up "
        f"{m['warmup_s']:.0f} s from the first committed input, window {m['window_s']:.0f} s)",
        "",
        "words/s = a backlog's rate: the least-squares slope over the window of the input "
        "words before the consumer group's committed offsets of the shared "
        f"input topic ({src['words']:,} words, {src['lines']:,} lines, "
        f"{src['distinct_words']:,} distinct words; one sample a second). No reader of the "
        "output competes with the row in the window: output offsets/s are the output topic's "
        "end offsets (records and transaction markers). "
        "'kept up': the group's lag on its shuffle/repartition topics did not grow over the "
        "window in any run (- where there is none; kept up 'x/5': in x runs). 'machine "
        "busy': all processes' CPU over the window against its 2 cores; the results give "
        "each run's CPU of processes other than the row's, the broker and the bench.",
        "",
        "| row | runs ok | words/s median | range | % of ceiling (words/s; CPU per word) "
        "| output offsets/s "
        "| CPU s / M words | broker CPU s / M words | machine busy % | window s | kept up "
        "| interval ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for key, row in steady["rows"].items():
        wps = row["words_per_s"]
        rng = wps["range"]
        judged = [
            r["internal_lag"]["kept_up"]
            for r in row["runs"]
            if r.get("ok") and r.get("internal_lag", {}).get("judged")
        ]
        kept = "-" if not judged else ("yes" if all(judged) else f"{sum(judged)}/{len(judged)}")
        out.append(
            f"| {key} | {row['ok_runs']}/{len(row['runs'])} | {_fmt(wps['median'])} "
            f"| {_fmt(rng[0]) if rng else '-'} - {_fmt(rng[1]) if rng else '-'} "
            f"| {_fmt(row.get('ceiling_pct'), 1)}; {_fmt(row.get('ceiling_cpu_pct'), 1)} "
            f"| {_fmt(row['output_offsets_per_s']['median'])} "
            f"| {_fmt(row['cpu_s_per_million_words'], 3)} "
            f"| {_fmt(row['broker_cpu_s_per_million_words'], 3)} "
            f"| {_fmt(row['machine_busy_pct'], 1)} | {_fmt(row['window_s'], 1)} | {kept} "
            f"| {row['interval_ms']} |"
        )
    perf = steady["consumer_perf_test"]
    rec = perf["records_per_s"]
    out += [
        "",
        f"kafka-consumer-perf-test (one Java consumer, read_committed, no processing): "
        f"{_fmt(rec['median'])} records/s median (range {rec['range']}), i.e. "
        f"{_fmt(perf['words_per_s']['median'])} words/s at {src['words_per_line']} words a "
        f"line. exactly-once overhead (processor, 1 - exactly_once / at_least_once words/s): "
        f"{_fmt(steady.get('eos_overhead_pct'), 1)} %; in CPU per word "
        f"(exactly_once / at_least_once - 1): {_fmt(steady.get('eos_overhead_cpu_pct'), 1)} %.",
        "",
        "Same work? What each row wrote to the broker per million input words (medians; "
        "offsets = records plus transaction markers; bytes from the broker's log directory, "
        "scaled up where consumed records were purged):",
        "",
        "| row | shuffle records | shuffle MB | output records | output MB | changelog records "
        "| changelog MB | other MB | all MB written |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, row in steady["rows"].items():
        w = row.get("work_per_m_words") or {}
        if not w:
            out.append(f"| {key} | | | | | | | | |")
            continue
        out.append(
            f"| {key} | {_fmt(w.get('shuffle_offsets'))} | {_mb(w.get('shuffle_bytes'))} "
            f"| {_fmt(w.get('output_offsets'))} | {_mb(w.get('output_bytes'))} "
            f"| {_fmt(w.get('changelog_offsets'))} | {_mb(w.get('changelog_bytes'))} "
            f"| {_mb(w.get('other_bytes'))} | {_mb(w.get('bytes_written'))} |"
        )
    out += ["", "Configuration of each row:", ""]
    for key, row in steady["rows"].items():
        note = f" ({row['note']})" if row.get("note") else ""
        out.append(
            f"* **{key}**{note}: {row['system']}, interval {row['interval_ms']} ms; "
            f"`{json.dumps(row['settings'])}`"
        )
    return out


def _mb(value: Any) -> str:
    return f"{value / 1e6:,.2f}" if isinstance(value, int | float) else "-"


def _ack_cells(summary: dict[str, Any]) -> str:
    keyed = summary.get("keyed_ack_ms") or {}
    return " / ".join(
        _fmt((keyed.get(k) or {}).get("p50"), 0) for k in ("alignment", "sync", "upload", "commit")
    )


def _checkpoint_row(label: str, c: dict[str, Any]) -> str:
    if not c.get("completed"):
        return f"| {label} | 0 | | | | | |"
    return (
        f"| {label} | {c['completed']} | {_fmt(c.get('duration_ms_p50'))} / "
        f"{_fmt(c.get('duration_ms_p99'))} | {_mb(c.get('uploaded_bytes_p50'))} / "
        f"{_mb(c.get('uploaded_bytes_max'))} | {_mb(c.get('full_bytes_p50'))} "
        f"| {_fmt(c.get('uploaded_over_full_pct'), 1)} % | {_ack_cells(c)} |"
    )


def _checkpoint_tables(report: dict[str, Any], rates: list[int]) -> list[str]:
    """This project's checkpoints: duration and size per phase, the latency pipeline, the
    state-size scaling."""
    ours = report["systems"].get("processor", {})
    out = [
        "",
        "processor checkpoints (duration: trigger to the last task's acknowledgement; uploaded: "
        "what the incremental snapshot copied; full: the size of all snapshots of the checkpoint):",
        "",
        "| phase | checkpoints | duration p50 / p99 ms | uploaded p50 / max MB | full p50 MB "
        "| Σ uploaded / Σ full | keyed ack p50 ms: align / sync / upload / commit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    if ours.get("checkpoint_summary"):
        out.append(_checkpoint_row("throughput (backlog)", ours["checkpoint_summary"]))
    for rate in rates:
        lr = report["latency"].get(str(rate), {}).get("processor", {})
        if lr.get("checkpoints"):
            out.append(_checkpoint_row(f"latency at {rate:,} words/s", lr["checkpoints"]))
    scaling = report.get("state_scaling") or {}
    for keys, run in scaling.items():
        if run.get("steady"):
            out.append(_checkpoint_row(f"{int(keys):,} keys, steady trickle", run["steady"]))
    for rate in rates[:1]:
        pipe = report["latency"].get(str(rate), {}).get("processor", {}).get("pipeline_ms")
        if not pipe or not pipe.get("checkpoints"):
            continue
        keys = [
            ("trigger_to_sources_committed", "trigger -> sources committed"),
            ("sources_committed_to_keyed_committed", "-> keyed committed"),
            ("trigger_to_keyed_committed", "trigger -> keyed committed"),
            ("alignment", "keyed: alignment"),
            ("sync", "sync"),
            ("upload", "upload"),
            ("commit", "commit"),
            ("keyed_unaccounted", "rest (polls, waits)"),
            ("source_commit", "source commit"),
        ]
        out += [
            "",
            f"processor, where a checkpoint's time goes at {rate:,} words/s "
            f"({pipe['checkpoints']} checkpoints; control-topic timestamps and ack fields; "
            "p50 / p99 ms):",
            "",
            "| " + " | ".join(label for _, label in keys) + " |",
            "|" + " ---: |" * len(keys),
            "| "
            + " | ".join(
                f"{_fmt(pipe[k]['p50'])} / {_fmt(pipe[k]['p99'])}" for k, _ in keys if k in pipe
            )
            + " |",
        ]
    runs = [(int(k), v) for k, v in scaling.items()]
    if runs:
        out += [
            "",
            "processor, state-size scaling (N distinct keys, built from a backlog, then a trickle "
            "of 2,000 updates/s to random keys; steady = checkpoints during the trickle):",
            "",
            "| keys | build s (keys/s) | steady checkpoints | duration p50 / p99 / max ms "
            "| uploaded p50 / max MB | full p50 MB | peak RSS MB |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for keys, run in sorted(runs):
            c = run.get("steady") or {}
            if run.get("error") or not c.get("completed"):
                out.append(f"| {keys:,} | {run.get('error', 'no steady checkpoints')} | | | | | |")
                continue
            out.append(
                f"| {keys:,} | {_fmt(run.get('build_s'), 1)} ({_fmt(run.get('build_keys_per_s'))})"
                f" | {c['completed']} | {_fmt(c.get('duration_ms_p50'))} / "
                f"{_fmt(c.get('duration_ms_p99'))} / {_fmt(c.get('duration_ms_max'))} "
                f"| {_mb(c.get('uploaded_bytes_p50'))} / {_mb(c.get('uploaded_bytes_max'))} "
                f"| {_mb(c.get('full_bytes_p50'))} | {_fmt(run.get('peak_rss_mb'))} |"
            )
    return out


# ------------------------------------------------------------------------------ main


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so that every `finally` stops its processes."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="300k words, 100k/1M keys, no recovery"
    )
    parser.add_argument("--words", type=int, help="corpus size per system")
    parser.add_argument("--systems", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument(
        "--latency-rates", help="words/s of the latency phase, comma-separated (20000,5000)"
    )
    parser.add_argument(
        "--latency-intervals",
        help="checkpoint/commit intervals (ms) of the latency phase, comma-separated "
        "(full: 100,250,500,1000; quick: 1000)",
    )
    parser.add_argument(
        "--half-max",
        action=argparse.BooleanOptionalAction,
        help="latency also at half of each system's steady-state (backlog) median; the live "
        "highest sustainable rate and the latency at half of it: bench/sustainable.py",
    )
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--no-recovery", action="store_true")
    parser.add_argument("--no-scaling", action="store_true", help="no state-scaling phase")
    parser.add_argument(
        "--scaling-keys", help="state sizes (distinct keys) of the scaling phase, comma-separated"
    )
    parser.add_argument("--no-steady", action="store_true", help="no steady-state phase")
    parser.add_argument(
        "--no-capacity", action="store_true", help="no balanced live capacity phase"
    )
    parser.add_argument("--reps", type=int, help="steady state: runs per row (full 5, quick 1)")
    parser.add_argument(
        "--steady-words", type=int, help="steady state: words in the shared input topic"
    )
    parser.add_argument("--warmup", type=float, help="steady state: warm-up seconds")
    parser.add_argument("--window", type=float, help="steady state: window seconds")
    parser.add_argument(
        "--seed", type=int, default=11, help="steady state: the seed of the run order"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (broker, logs)")
    parser.add_argument(
        "--port",
        type=int,
        default=PORT,
        help=f"the bench's broker port, its controller's the next one (default {PORT})",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS,
        help=f"where <timestamp>.json/.png and latest.md/.png go (default {RESULTS})",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only rewrite latest.md and the figures (<JSON>.png, latest.png) from a results file",
    )
    parser.add_argument(
        "--with-capacity",
        type=Path,
        nargs="+",
        metavar="CAPACITY_JSON",
        help="bench/capacity.py results files (measuring the same code) as the capacity "
        "phase: with --render, put them into that results file and render it; in a run, "
        "instead of measuring it (the latency at half the capacity needs it; a full run in "
        "sittings)",
    )
    args = parser.parse_args(argv)
    results: Path = args.results_dir
    if args.render:
        rendered = json.loads(args.render.read_text())
        if args.with_capacity:
            rendered["capacity"] = _sittings(parser, args.with_capacity, rendered)
        if rendered.get("steady") or rendered.get("capacity"):
            # Summaries and the headline from the runs themselves, as this version computes
            # them.
            if rendered.get("steady"):
                _summarize_steady(rendered["steady"])
            rendered["headline"] = _headline(rendered)
            args.render.write_text(json.dumps(rendered, indent=2) + "\n")
        results.mkdir(parents=True, exist_ok=True)
        (results / "latest.md").write_text(markdown(rendered))
        png = args.render.with_suffix(".png")
        write_plot(plot_python(), args.render, png)
        if png != results / "latest.png":
            shutil.copyfile(png, results / "latest.png")
        say(f"wrote {results / 'latest.md'}, {png} and {results / 'latest.png'}")
        return 0
    sittings = None
    if args.with_capacity:  # the capacity measured before: latency at half of it
        sittings = _sittings(parser, args.with_capacity, {"source": _source_version()})
        args.no_capacity = True
    mode = QUICK if args.quick else FULL
    if args.words:
        mode = Mode(**{**mode.__dict__, "words": args.words})
    if args.latency_rates:
        rates = tuple(int(r) for r in args.latency_rates.split(","))
        mode = Mode(**{**mode.__dict__, "latency_rates": rates})
    if args.latency_intervals:
        intervals = tuple(int(i) for i in args.latency_intervals.split(","))
        mode = dataclasses.replace(mode, latency_intervals=intervals)
    if args.half_max is not None:
        mode = dataclasses.replace(mode, latency_half_max=args.half_max)
    if args.scaling_keys:
        sizes = tuple(int(k) for k in args.scaling_keys.split(","))
        mode = Mode(**{**mode.__dict__, "scaling_keys": sizes})
    steady = QUICK_STEADY if args.quick else FULL_STEADY
    overrides = {
        "reps": args.reps,
        "words": args.steady_words,
        "warmup_s": args.warmup,
        "window_s": args.window,
    }
    steady = dataclasses.replace(steady, **{k: v for k, v in overrides.items() if v is not None})
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = set(names) - PEERS.keys()
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; known: {list(PEERS)}")
    peers = [PEERS[n]() for n in names]

    # The rows' peers too: a variant may have a build of its own (Flink SQL's jar).
    for peer in [*peers, *(row.peer for row in steady_rows(names))]:
        say(f"preparing {peer.title}")
        peer.prepare()
    if not args.no_capacity:
        say("preparing the load generator")
        loadgen.prepare()
    say("preparing matplotlib (for the figure)")
    plotter = plot_python()

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = stamp.replace("-", "")
    say(f"corpus: {mode.words:,} words, seed 1")
    text = list(corpus.lines(mode.words, seed=1))
    lines = [line.encode() for line in text]
    expected = dict(exact_counts(text))
    del text

    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    report: dict[str, Any] = {
        "timestamp": stamp,
        "mode": mode.__dict__,
        "machine": _machine(),
        "source": _source_version(),
        "corpus": {
            "lines": len(lines),
            "words": sum(expected.values()),
            "distinct_words": len(expected),
        },
        "systems": {},
        "steady": None,
        "latency": {},
        "latency_by_interval": {},
        "state_scaling": {},
        "recovery": None,
    }
    failed = False
    with _terminate_as_interrupt():
        try:
            say(f"starting the broker on {broker.bootstrap} (data in {broker.data_dir})")
            broker.start()
            for peer in peers:
                try:
                    report["systems"][peer.name] = throughput(
                        peer,
                        broker,
                        lines,
                        expected,
                        tmp,
                        run_id,
                        mode.timeout_s,
                    )
                except BrokerDied:
                    raise
                except Exception as exc:  # noqa: BLE001 - one system's crash is its result
                    traceback.print_exc()
                    report["systems"][peer.name] = {
                        "system": peer.title,
                        "ok": False,
                        "error": repr(exc),
                    }
                failed |= not report["systems"][peer.name]["ok"]
            if not args.no_steady:
                rows = steady_rows(names)
                if args.quick:  # CI: only rows that run code of their own
                    rows = [r for r in rows if r.key not in SETTING_ONLY]
                report["steady"] = steady_state(rows, broker, steady, tmp, run_id, args.seed)
                failed |= any(
                    not r.get("ok")
                    for row in report["steady"]["rows"].values()
                    for r in row["runs"]
                )
            if sittings is not None:
                report["capacity"] = sittings
            elif not args.no_capacity:
                report["capacity"] = capacity_phase(
                    names, broker, steady.reps, tmp, run_id, args.quick, args.seed
                )
                failed |= any(
                    not r.get("ok")
                    for row in report["capacity"]["rows"].values()
                    for r in row["runs"]
                )
            if not args.no_latency:
                sweep = latency_phase(peers, broker, mode, report, tmp, run_id)
                report["latency_by_interval"] = sweep
                # The fixed rates at the common interval: the headline's and earlier reports'.
                common = sweep.get(str(INTERVAL_MS), {})
                report["latency"] = {k: v for k, v in common.items() if k != "half_max"}
            if mode.scaling_keys and not args.no_scaling and "processor" in names:
                report["state_scaling"] = scaling(broker.bootstrap, mode, tmp, run_id)
                failed |= any("error" in r for r in report["state_scaling"].values())
            if mode.recovery_words and not args.no_recovery and "processor" in names:
                report["recovery"] = recovery(broker.bootstrap, mode.recovery_words)
        except BrokerDied as exc:
            failed = True
            report["aborted"] = str(exc)
            say(f"ABORTED: {exc}")
        except BaseException:
            failed = True
            raise
        finally:
            say("stopping the broker")
            broker.stop()
            if failed or args.keep:
                say(f"kept {tmp} (broker data and logs)")
            else:
                shutil.rmtree(tmp, ignore_errors=True)

    report["headline"] = _headline(report)
    results.mkdir(parents=True, exist_ok=True)
    source = results / f"{stamp}.json"
    source.write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (results / "latest.md").write_text(table)
    print(table, file=sys.stderr)
    png = results / f"{stamp}.png"
    try:
        write_plot(plotter, source, png)
        shutil.copyfile(png, results / "latest.png")
        say(f"wrote {source}, {png}, {results / 'latest.md'} and {results / 'latest.png'}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        failed = True
        say(f"wrote {source} and {results / 'latest.md'}; the figure FAILED: {exc}")
    print(json.dumps(report["headline"]), flush=True)
    return 1 if failed else 0


def _headline(report: dict[str, Any]) -> dict[str, Any]:
    """Per system and row: ``words_per_s`` is the balanced live capacity (bench/capacity.py:
    the highest rate at which every stage kept up, median of the runs) when that phase ran,
    else the steady-state backlog median (else the first phase's backlog figure);
    ``backlog_words_per_s`` is the steady-state backlog median beside it."""
    systems = report["systems"]
    rates = report["mode"]["latency_rates"]
    lat = report["latency"].get(str(rates[0]), {}) if rates else {}
    steady = report.get("steady") or {}
    rows = steady.get("rows", {})
    live = (report.get("capacity") or {}).get("rows", {})
    ceiling_row = rows.get("ceiling", {})
    ceiling = ceiling_row.get("words_per_s", {}).get("median")
    ceiling_cpu = ceiling_row.get("cpu_s_per_million_words")

    def figures(name: str) -> dict[str, Any]:
        row = rows.get(name)
        cap = live.get(name, {}).get("summary")
        if row is None and cap is None:
            return {"words_per_s": systems.get(name, {}).get("words_per_s")}
        backlog = row["words_per_s"] if row else {}
        words = cap["words_per_s"] if cap else backlog.get("median")
        cpu = (cap or {}).get("cpu_s_per_m_words") or (row or {}).get("cpu_s_per_million_words")
        return {
            "words_per_s": words,
            "words_per_s_range": cap["words_per_s_range"] if cap else backlog.get("range"),
            "measured_as": "balanced live capacity" if cap else "backlog",
            "backlog_words_per_s": backlog.get("median"),
            "cpu_s_per_m_words": cpu,
            "bench_cpu_share": (cap or {}).get("bench_cpu_share")
            if cap
            else (row or {}).get("bench_cpu_share"),
            "loadgen_cpu_share": (cap or {}).get("loadgen_cpu_share"),
            "checkpoints_per_min": (cap or {}).get("checkpoints_per_min"),
            "runs": (cap or {}).get("ok_runs") if cap else (row or {}).get("ok_runs"),
            "ceiling_pct": round(100 * words / ceiling, 1) if words and ceiling else None,
            "ceiling_cpu_pct": round(100 * ceiling_cpu / cpu, 1) if cpu and ceiling_cpu else None,
        }

    ours = systems.get("processor", {})
    head: dict[str, Any] = {
        "mode": report["mode"]["name"],
        "runs": steady.get("mode", {}).get("reps", 0) if steady else 0,
        "processor": {
            **figures("processor"),
            "p99_latency_ms": lat.get("processor", {}).get("p99_ms"),
            "recovery_s": (report["recovery"] or {}).get("recovery_s"),
        },
    }
    for name in PEERS:
        if name != "processor":
            head[name] = figures(name)
    for key in [*rows, *live]:
        if key not in head and not key.startswith("ceiling"):
            head[key] = figures(key)
    perf = steady.get("consumer_perf_test", {})
    uncombined = rows.get("ceiling_uncombined", {})
    head["ceiling"] = {
        "words_per_s": ceiling,
        "words_per_s_range": ceiling_row.get("words_per_s", {}).get("range"),
        "cpu_s_per_m_words": ceiling_cpu,
        "machine_busy_pct": ceiling_row.get("machine_busy_pct"),
        "consumer_perf_test_records_per_s": perf.get("records_per_s", {}).get("median"),
        "consumer_perf_test_words_per_s": perf.get("words_per_s", {}).get("median"),
    }
    head["ceiling_uncombined"] = {
        "words_per_s": uncombined.get("words_per_s", {}).get("median"),
        "words_per_s_range": uncombined.get("words_per_s", {}).get("range"),
        "cpu_s_per_m_words": uncombined.get("cpu_s_per_million_words"),
        "machine_busy_pct": uncombined.get("machine_busy_pct"),
    }
    head["eos_overhead_pct"] = steady.get("eos_overhead_pct")
    head["checkpoint_overhead_pct"] = ours.get("checkpoint_blocking", {}).get("cpu_pct")
    return head


def _sittings(
    parser: argparse.ArgumentParser, paths: list[Path], results: dict[str, Any]
) -> dict[str, Any]:
    """The capacity phase from bench/capacity.py's reports at ``paths``, each of which must
    have measured the code ``results`` measured."""
    sittings = [json.loads(path.read_text()) for path in paths]
    ours = results["source"]["commit"]
    for path, sitting in zip(paths, sittings, strict=True):
        if not same_measured_code(ours, sitting.get("commit")):
            parser.error(
                f"{path} measured {sitting.get('commit')}, the results {ours}: the code "
                "measured differs between them"
            )
    return capacity.join_sittings(sittings)


# What a sitting measures: everything but the results, the docs and the tests.
NOT_MEASURED = (":!bench/results", ":!*.md", ":!docs", ":!tests", ":!.ci")


def same_measured_code(a: str, b: str | None) -> bool:
    """Whether commits ``a`` and ``b`` run the same code (a full run in several sittings may
    span commits that only add results, docs or tests)."""
    if b is None:
        return False
    if a == b:
        return True
    done = subprocess.run(
        ["git", "diff", "--quiet", a, b, "--", ".", *NOT_MEASURED], cwd=ROOT, check=False
    )
    return done.returncode == 0


def _source_version() -> dict[str, Any]:
    """The commit measured, and which files of the project differed from it (uncommitted)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    dirty = [line[3:] for line in git("status", "--porcelain", "processor").splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "uncommitted_processor_files": dirty}


def _machine() -> str:
    import platform

    return f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
