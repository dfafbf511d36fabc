"""bench/run.py's phases: throughput on a backlog, the steady state, the capacity, recovery and
state scaling (latency is bench/harness/latency_phase.py)."""

from __future__ import annotations

import dataclasses
import os
import random
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness import capacity
from bench.harness.common import own_cpu_s as _own_cpu_s
from bench.harness.common import say
from bench.harness.measure import (
    OutputWatcher,
    ProcessSampler,
    create_topic,
    log_anomalies,
    machine_busy_s,
    process_cpu_s,
    produce_all,
    rates,
)
from bench.harness.modes import INTERVAL_MS, PARALLELISM, PARTITIONS, Mode, Row, steady_rows
from bench.harness.scaling import state_scaling
from bench.harness.steady import (
    SteadyMode,
    consumer_perf_test,
    produce_input,
    spread,
    steady_run,
    tools_classpath,
)
from bench.peers.base import Job, Peer, Running
from bench.peers.processor_peer import (
    ProcessorPeer,
    blocked_in_checkpoints,
    checkpoint_markers,
    checkpoint_stats,
    checkpoint_summary,
    completed_checkpoints,
)
from processor.localkafka.broker import LocalBroker

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
        return throughput_run(peer, job, watcher, broker, words, len(lines), timeout, on_start)
    finally:
        watcher.close()


def throughput_run(
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
        exact_at = watcher.wait_exact(timeout, alive=lambda: both_alive(running, broker))
        for other in also:
            exact_at = max(
                exact_at, other.wait_exact(timeout, alive=lambda: both_alive(running, broker))
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
    check_broker(broker)
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
        "method": "slope of the committed input offsets over the window (bench/harness/steady.py)",
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
        check_broker(broker)
        out["rows"][key]["runs"].append(result)
    summarize_steady(out)
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


def summarize_steady(out: dict[str, Any]) -> None:
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


def check_broker(broker: LocalBroker) -> None:
    if broker.status() is None:
        raise BrokerDied(
            f"the broker on {broker.bootstrap} died during the run (see {broker.log_file}); "
            "was it killed from outside the bench?"
        )


def both_alive(running: Running, broker: LocalBroker) -> bool:
    return running.alive() and broker.status() is not None


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def wait_reading(predicate: Any, timeout: float, watcher: OutputWatcher) -> None:
    """Until ``predicate()`` or ``timeout``; raises if ``watcher``'s output reader failed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        if watcher.error is not None:
            raise RuntimeError(f"reading the output failed: {watcher.error}")
        time.sleep(0.05)


def recovery(bootstrap: str, words: int) -> dict[str, Any]:
    from bench.harness.recovery import measure_run

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
