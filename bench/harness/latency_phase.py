"""bench/run.py's latency phase: per-line latency at fixed input rates and at half of each
system's capacity, at each checkpoint/commit interval."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness.common import say
from bench.harness.latency_jvm import latency_half
from bench.harness.measure import (
    OutputWatcher,
    RateProducer,
    create_topic,
    exact_counts,
    latency_percentiles,
    produce_all,
)
from bench.harness.modes import INTERVAL_MS, PARALLELISM, PARTITIONS, Mode
from bench.harness.phases import BrokerDied, both_alive, check_broker, wait_reading
from bench.peers.base import Job, Peer, Running
from bench.peers.processor_peer import (
    ProcessorPeer,
    checkpoint_summary,
    completed_checkpoints,
    pipeline_breakdown,
)
from processor.commands import corpus
from processor.localkafka.broker import LocalBroker


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
        wait_reading(
            lambda: probe in watcher.current or not both_alive(running, broker), 120, watcher
        )
        if probe not in watcher.current:
            raise RuntimeError("the system never processed the probe line")
        if on_ready is not None:
            on_ready(running)
        started = time.time()
        producer.start()
        producer.join(mode.latency_warmup_s + mode.latency_s + 120)
        if producer.error is not None:
            raise RuntimeError(f"the rate producer failed: {producer.error}")
        watcher.wait_exact(120, alive=lambda: both_alive(running, broker))
    except (TimeoutError, RuntimeError) as exc:
        result["error"] = str(exc)
    finally:
        running.stop()
    check_broker(broker)
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
                rates.append(("half_max", int(round(median / 2, -3))))
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
                    if key == "half_max":  # the JVM bulk and probes, mode.latency_runs runs
                        at[peer.name] = latency_half(
                            peer, broker, rate, mode, workdir, run_id, interval, mode.latency_runs
                        )
                    else:
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
    return out
