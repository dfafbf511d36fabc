"""Balanced live capacity: the highest input rate at which every stage of a system keeps up.

A backlog measures the first stage: with the whole input waiting, a system's source can run
ahead of a later stage that starves (Kafka Streams' count stage did 243 k words/s while its
input stage read 525 k and the repartition lag grew by 17 M records). What a user can run is
the rate at which every stage keeps pace, so this module finds it live:

* **Input**: ``bench/harness/loadgen.py``, a JVM producer whose rate changes while it runs (lines
  drawn, seeded, from a pool of ``corpus.lines``; line k into partition k % 4). It costs the
  machine a fraction of a core and reports how far it lagged its rate: a step at which the
  producer could not keep the rate is reported as the producer's limit, never as the
  system's.
* **One job per run, the rate stepped up** (``factor`` apart from ``start``): each step holds
  its rate for ``settle_s`` then a ``window_s`` window. A step is **kept up** when, over the
  window, the group's lag on the input and on every internal topic (repartition, shuffle),
  each in seconds of its own input, did not grow by more than ``MAX_GROWTH`` s per s (the
  least-squares slope) and its median is at most ``MAX_LAG_S`` (a standing backlog is not
  keeping up either). The first step that is not kept up is tried once more after the lag
  drains (a cold start's standing backlog must not end a run: issue #42). After the first
  step that is not kept up again, the input drains at half the last good rate, then steps
  between the two (geometric means) until they are at most
  ``resolution`` apart (``bisections`` at most): every row's figure to the same precision,
  whether its ladder went up or, from a start too high, down.
* **Exact**: then the producer stops, the job drains, stops, and only then the bench reads
  the committed output (read_committed, the last count per word) and compares it with the
  counts of what the producer sent: nothing reads the output while the system runs.
* **Costs at the highest kept-up step**: the system's CPU per million words, the broker's,
  the load generator's and the bench's own share of the machine, checkpoints/commits per
  minute (transaction markers on the output topic, per producer).

The lag is sampled once a second by the bench's process from the group's committed offsets
and the topics' end offsets (a few requests, no records read).
"""

from __future__ import annotations

import collections
import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from bench.harness.common import cores, machine, own_cpu_s
from bench.harness.lag import MAX_GROWTH, MAX_LAG_S, LagProbe, judge
from bench.harness.loadgen import LoadGenerator
from bench.harness.markers import commit_markers
from bench.harness.measure import (
    OutputWatcher,
    ProcessSampler,
    create_topic,
    machine_busy_s,
    process_cpu_s,
    slope,
    words_of,
)
from bench.harness.steady import delete_topics, list_topics, topic_footprint, work_summary
from bench.peers.base import Job, Peer
from processor.localkafka.broker import LocalBroker

# The producer kept the rate: at least this share of it acknowledged over the window (how far
# it fell behind at worst is reported beside it).
MIN_ACHIEVED = 0.95
# Between steps: drained once every stage is this close to its input (seconds of it).
DRAINED_LAG_S = 3.0
MIN_RATE = 1_000  # the ladder goes no lower


@dataclass(frozen=True)
class CapacityMode:
    start: int  # words/s of the first step
    # Steps 1.2x apart, then bisections to 10 %, in some 3-4 minutes a run, so that 5 runs
    # of every row fit in a sitting. A fixed count of one bisection left a ladder that came
    # down from a start too high (two steps: 1.44x) at 1.2x, against 1.1x for one that went up.
    factor: float = 1.2
    resolution: float = 1.1
    bisections: int = 3
    warmup_s: float = 15.0  # at the start rate, from the first committed input
    settle_s: float = 3.0
    # A lag that saws by a commit interval (A s; this project's shuffle lag saws by an epoch)
    # gives a least-squares slope over n one-second samples a spread of about
    # 0.29 A / sqrt(n^3 / 12): 0.009 s per s for A = 1.5 s and n = 30, a third of MAX_GROWTH
    # (at n = 20 it was half of it, and steps kept up failed by chance).
    window_s: float = 30.0
    drain_timeout_s: float = 60.0
    max_steps: int = 14


# ------------------------------------------------------------------------------ ladder


def next_rates(factor: float) -> Callable[[int], int]:
    def up(rate: int) -> int:
        step = 10_000 if rate >= 100_000 else 1_000
        return round(rate * factor / step) * step

    return up


def down(rate: int, factor: float) -> int:
    """The next rate down the ladder: two steps, so that it finds a rate kept up soon."""
    step = 10_000 if rate >= 200_000 else 1_000
    return round(rate / factor**2 / step) * step


def next_bisection(good: int, bad: int, done: int, mode: CapacityMode) -> int | None:
    """The next rate between a kept-up ``good`` and a failed ``bad`` after ``done``
    bisections, or None once they are within ``mode.resolution`` of each other."""
    if bad / good <= mode.resolution or done >= mode.bisections:
        return None
    middle = geometric_middle(good, bad)
    return None if middle in (good, bad) else middle


def geometric_middle(good: int, bad: int) -> int:
    step = 10_000 if good >= 100_000 else 1_000
    return round(math.sqrt(good * bad) / step) * step


# ------------------------------------------------------------------------------ one run


def capacity_run(
    peer: Peer,
    job: Job,
    broker: LocalBroker,
    pool: Sequence[str],
    mode: CapacityMode,
    say: Callable[[str], None],
    seed: int = 7,
    partitions: int = 4,
) -> dict[str, Any]:
    """One job, the rate stepped up until a stage falls behind; then the exact check."""
    bootstrap = broker.bootstrap
    before = list_topics(bootstrap)
    create_topic(bootstrap, job.input_topic, partitions)
    create_topic(bootstrap, job.output_topic, partitions)
    broker_pid = int(broker.pid_file.read_text().strip())
    gen = LoadGenerator(bootstrap, job.input_topic, partitions, pool, seed)
    words_per_record = statistics.fmean(len(words_of(line)) for line in pool[:20_000])
    result: dict[str, Any] = {"job": job.name, "interval_ms": job.interval_ms, "steps": []}
    running = None
    sampler = None
    probe = LagProbe(bootstrap, peer.group_id(job), job.input_topic, job.output_topic, partitions)
    error: str | None = None
    try:
        gen.start()
        running = peer.start(job)
        sampler = ProcessSampler(running.roots)
        sampler.start()
        probe.start()
        gen.set_rate(mode.start)
        deadline = time.time() + 180
        while probe.committed_input() == 0:
            if not running.alive():
                raise RuntimeError("exited before committing any input")
            if time.time() > deadline:
                raise TimeoutError("no committed input progress within 180 s")
            time.sleep(0.5)
        result["first_commit_after_s"] = round(time.time() - running.started_at, 1)
        time.sleep(mode.warmup_s)
        good = bad = 0
        rate = mode.start
        up = next_rates(mode.factor)
        bisections = 0
        retested = False
        for _ in range(mode.max_steps):
            step = _step(rate, gen, probe, sampler, broker_pid, mode, words_per_record, running)
            result["steps"].append(step)
            say(f"{job.name}: {rate:,} words/s: {step['why']}")
            if step.get("producer_limited"):
                result["producer_limited_at"] = rate
                break
            if not step["kept_up"] and not bad and not retested:
                # The first step that falls behind is tried once more after the lag drains:
                # a cold start's standing backlog (a JIT, caches, a first checkpoint) must not
                # end the ladder at a rate the system keeps up with once warm.
                retested = True
                step["retest"] = "next"
                _drain(gen, probe, max(good, rate) // 2, words_per_record, mode.drain_timeout_s)
                continue
            if step["kept_up"]:
                good = rate
            else:
                bad = rate
            if not bad:  # up the ladder
                rate = up(rate)
                continue
            if not good:  # the start was too high: down the ladder, after draining
                rate = down(rate, mode.factor)
                if rate < MIN_RATE:
                    break
                _drain(gen, probe, rate // 2, words_per_record, mode.drain_timeout_s)
                continue
            middle = next_bisection(good, bad, bisections, mode)
            if middle is None:
                break
            bisections += 1
            _drain(gen, probe, good // 2, words_per_record, mode.drain_timeout_s)
            rate = middle
        result["capacity_words_per_s"] = good
        result["first_not_kept_up"] = bad
        top = next((s for s in result["steps"] if s["rate"] == good and s["kept_up"]), None)
        if top is not None:
            result["at_capacity"] = top["costs"]
        gen.set_rate(0)
        if not _wait(probe.drained, mode.drain_timeout_s):
            result["drain"] = "not drained"
    except (TimeoutError, RuntimeError) as exc:
        error = str(exc)
    finally:
        expected: collections.Counter[str] = collections.Counter()
        try:
            expected = gen.stop()
        except Exception as exc:  # noqa: BLE001 - the run's error
            error = error or f"load generator: {exc}"
        if running is not None:
            running.stop()
        if sampler is not None:
            sampler.stop()
        probe.stop()
        gen.close()
    if error is None:
        # A failed check keeps the ladder's steps in the result: they say what was measured.
        try:
            result["verify"] = verify_output(bootstrap, job.output_topic, expected)
            if not result["verify"]["exact"]:
                error = "output not exact"
            result["checkpoints_per_min"] = commits_per_minute(
                broker, job.output_topic, partitions, peer.output_writers(job), result
            )
        except (TimeoutError, RuntimeError, KafkaException) as exc:
            error = f"checking the output: {exc}"
    result["ok"] = error is None
    result["error"] = error
    created = sorted(list_topics(bootstrap) - before)
    footprint = topic_footprint(broker, created)
    result["work"] = work_summary(footprint, job.output_topic, sum(expected.values()))
    delete_topics(bootstrap, created)
    return result


def _step(
    rate: int,
    gen: LoadGenerator,
    probe: LagProbe,
    sampler: ProcessSampler,
    broker_pid: int,
    mode: CapacityMode,
    words_per_record: float,
    running: Any,
) -> dict[str, Any]:
    gen.set_rate(rate)
    time.sleep(mode.settle_s)
    start = time.time()
    cpu0 = (process_cpu_s(broker_pid), machine_busy_s(), own_cpu_s(), gen.cpu_s())
    time.sleep(mode.window_s)
    end = time.time()
    cpu1 = (process_cpu_s(broker_pid), machine_busy_s(), own_cpu_s(), gen.cpu_s())
    if not running.alive():
        raise RuntimeError(f"exited during the run: {running.exit_codes()}")
    inside = [s for s in probe.samples if start <= s.at <= end]
    verdict = judge(inside, rate, words_per_record)
    achieved = gen.acked_words_per_s(start, end) or 0.0
    behind = gen.max_behind_ms(start, end)
    seconds = end - start
    words = achieved * seconds
    system_cpu = sampler.cpu_at(end) - sampler.cpu_at(start)
    n_cores = cores()
    verdict["rate"] = rate
    verdict["window"] = [round(start, 3), round(end, 3)]
    verdict["achieved_words_per_s"] = round(achieved)
    verdict["producer_max_behind_ms"] = behind
    # Only the rate achieved over the window: on a saturated machine the load generator's
    # thread can be descheduled for half a second, and it sends what it owes when it is back.
    if achieved < MIN_ACHIEVED * rate:
        verdict["producer_limited"] = True
        verdict["kept_up"] = False
        verdict["why"] = (
            f"the load generator could not keep the rate ({round(achieved):,} words/s): "
            "its limit, not the system's"
        )
    verdict["costs"] = {
        "cpu_s_per_m_words": round(system_cpu / (words / 1e6), 3) if words else None,
        "cpu_cores": round(system_cpu / seconds, 2),
        "broker_cpu_s_per_m_words": round((cpu1[0] - cpu0[0]) / (words / 1e6), 3)
        if words
        else None,
        "machine_busy_pct": round(100 * (cpu1[1] - cpu0[1]) / (n_cores * seconds), 1),
        "bench_cpu_share": round((cpu1[2] - cpu0[2]) / (n_cores * seconds), 4),
        "loadgen_cpu_share": round((cpu1[3] - cpu0[3]) / (n_cores * seconds), 4),
        "window_s": round(seconds, 1),
    }
    return verdict


def _drain(
    gen: LoadGenerator, probe: LagProbe, rate: int, words_per_record: float, timeout: float
) -> None:
    """A lower rate until every stage's lag is back under DRAINED_LAG_S seconds of its input
    (the last 5 samples), so that the next step starts from no backlog."""
    gen.set_rate(rate)

    def small() -> bool:
        recent = probe.samples[-5:]
        if len(recent) < 5 or recent[0].at < started:
            return False
        input_s = recent[-1].input_lag / max(1.0, rate / words_per_record)
        internal_rate = slope([(s.at, float(s.internal_end)) for s in recent]) or 0.0
        internal_s = recent[-1].internal_lag / internal_rate if internal_rate > 0 else 0.0
        return input_s <= DRAINED_LAG_S and internal_s <= DRAINED_LAG_S

    started = time.time()
    _wait(small, timeout)


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


# ------------------------------------------------------------------------------ after the run


def verify_output(bootstrap: str, topic: str, expected: dict[str, int]) -> dict[str, Any]:
    """The committed output read to its end after the job stopped (this read competes with
    nothing), judged as every phase judges it (bench/harness/measure.py OutputWatcher.finish)."""
    watcher = OutputWatcher(bootstrap, topic, expected)
    watcher.start()
    verdict = watcher.finish()
    return {**asdict(verdict), "exact": verdict.exact}


def commits_per_minute(
    broker: LocalBroker,
    output_topic: str,
    partitions: int,
    writers: int | None,
    result: dict[str, Any],
) -> float | None:
    """Transactions committed per minute and writer over the capacity step's window, from the
    transaction markers in the output's log (bench/harness/markers.py): the effective
    checkpoint/commit interval, measured the same way for every system."""
    top = next(
        (
            s
            for s in result.get("steps", [])
            if s["rate"] == result.get("capacity_words_per_s") and s["kept_up"]
        ),
        None,
    )
    if top is None:
        return None
    with contextlib.suppress(Exception):
        return commit_markers(broker, output_topic, partitions, writers, top.get("window"))
    return None


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A row's runs: the median capacity and its range, and the costs at capacity."""
    good = [r for r in runs if r.get("ok") and r.get("capacity_words_per_s")]
    caps = [r["capacity_words_per_s"] for r in good]
    costs = [r["at_capacity"] for r in good if "at_capacity" in r]

    def med(key: str) -> float | None:
        values = [c[key] for c in costs if c.get(key) is not None]
        return round(statistics.median(values), 4) if values else None

    cpm = [r["checkpoints_per_min"] for r in good if r.get("checkpoints_per_min")]
    per_min = round(statistics.median(cpm), 1) if cpm else None
    interval_ms = runs[0].get("interval_ms") if runs else None
    effective_ms = round(60_000 / per_min) if per_min else None
    return {
        "runs": len(runs),
        "ok_runs": len(good),
        "words_per_s": round(statistics.median(caps)) if caps else None,
        "words_per_s_range": [min(caps), max(caps)] if caps else None,
        "cpu_s_per_m_words": med("cpu_s_per_m_words"),
        "broker_cpu_s_per_m_words": med("broker_cpu_s_per_m_words"),
        "bench_cpu_share": med("bench_cpu_share"),
        "loadgen_cpu_share": med("loadgen_cpu_share"),
        "machine_busy_pct": med("machine_busy_pct"),
        "checkpoints_per_min": per_min,
        "effective_interval_ms": effective_ms,
        # Longer epochs combine more and commit less: a row whose checkpoints came more than
        # 1.5x slower than configured did not do the same work per word.
        "interval_flag": bool(effective_ms and interval_ms and effective_ms > 1.5 * interval_ms),
        "producer_limited": any("producer_limited_at" in r for r in runs),
    }


def describe(mode: CapacityMode) -> dict[str, Any]:
    return {
        **asdict(mode),
        "kept_up_when": {
            "lag_growth_max_s_per_s": MAX_GROWTH,
            "lag_median_max_s": MAX_LAG_S,
            "producer_achieved_min": MIN_ACHIEVED,
        },
    }


# ------------------------------------------------------------------------------ command line

# Where each row's ladder starts (words/s): about 0.4x of what it kept up with in the trial
# runs (the old starts were 0.8x), at most half its capacity, so that no ladder starts near
# its limit (issue #42); steps 1.2x apart reach it in about four steps.
START = {
    "processor": 300_000,
    "processor_no_combiner": 90_000,
    "processor_emit_record": 150_000,
    "processor_at_least_once": 300_000,
    "kafka_streams": 50_000,
    "kafka_streams_commit_100ms": 40_000,
    "kafka_streams_preagg": 200_000,
    "flink": 70_000,
    "flink_sql": 250_000,
    "flink_preagg": 250_000,
    "quix": 15_000,
}


def run_rows(
    rows: Sequence[Any],
    broker: LocalBroker,
    runs: int,
    workdir: Path,
    run_id: str,
    say: Callable[[str], None],
    quick: bool = False,
    seed: int = 1,
    starts: dict[str, int] | None = None,
    after_run: Callable[[dict[str, Any]], None] | None = None,
    pool: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every row ``runs`` times in a seeded random order; results per row and their summary.
    ``after_run`` is given the report so far after each run (a sitting cut short keeps it).
    ``pool``: the lines the load generator draws from (default: the corpus')."""
    import random

    from processor.commands import corpus

    if pool is None:
        pool = list(corpus.lines(300_000 if not quick else 50_000, seed=2))
    order = [(row, k) for k in range(runs) for row in rows]
    random.Random(seed).shuffle(order)
    starts = {**START, **(starts or {})}
    out: dict[str, Any] = {
        "method": "balanced live capacity (bench/capacity.py)",
        "machine": machine(),
        "order": [f"{row.key}#{k}" for row, k in order],
        "rows": {
            row.key: {
                "system": row.peer.title,
                "note": row.note,
                "settings": row.peer.settings(),
                "runs": [],
            }
            for row in rows
        },
    }
    for i, (row, k) in enumerate(order):
        mode = QUICK if quick else CapacityMode(start=starts.get(row.key, 100_000))
        out.setdefault("mode", describe(mode))
        say(f"capacity {i + 1}/{len(order)}: {row.key} run {k + 1}/{runs}")
        job = Job(
            bootstrap=broker.bootstrap,
            name=f"cap-{row.key}-{run_id}-{k}".replace("_", "-"),
            input_topic=f"cap-{row.key}-{k}.input",
            output_topic=f"cap-{row.key}-{k}.output",
            workdir=workdir / f"cap-{row.key}-{k}",
            interval_ms=row.interval_ms,
            parallelism=2,
        )
        try:
            result = capacity_run(row.peer, job, broker, pool, mode, say, seed=k + 1)
        except Exception as exc:  # noqa: BLE001 - one run's crash is its result
            result = {"job": job.name, "ok": False, "error": repr(exc)}
        out["rows"][row.key]["runs"].append(result)
        say(
            f"{row.key}: capacity {result.get('capacity_words_per_s')} words/s, "
            f"exact {result.get('verify', {}).get('exact')}, error {result.get('error')}"
        )
        for entry in out["rows"].values():
            entry["summary"] = summary(entry["runs"])
        if after_run is not None:
            after_run(out)
    for entry in out["rows"].values():
        entry["summary"] = summary(entry["runs"])
    return out


def join_sittings(sittings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One capacity phase from several sittings' reports: a row's runs from all of them, its
    summary over them all; ``sittings`` keeps each one's timestamp, commit and order. Only
    sittings on one machine join (ValueError otherwise): a median over two machines is no
    machine's figure."""
    if len(sittings) == 1:
        return dict(sittings[0])
    machines = [s.get("machine") for s in sittings]
    if None in machines or any(m != machines[0] for m in machines):
        raise ValueError(
            "sittings on different (or unnamed) machines are not joined: "
            + "; ".join(f"{s.get('timestamp')}: {s.get('machine')}" for s in sittings)
        )
    rows: dict[str, Any] = {}
    for sitting in sittings:
        for key, entry in sitting["rows"].items():
            joined = rows.setdefault(key, {**entry, "runs": []})
            joined["runs"] = joined["runs"] + entry["runs"]
    for entry in rows.values():
        entry["summary"] = summary(entry["runs"])
    first = sittings[0]
    return {
        **{k: v for k, v in first.items() if k not in ("rows", "order")},
        "rows": rows,
        "sittings": [
            {k: s.get(k) for k in ("timestamp", "commit", "order", "mode", "machine")}
            for s in sittings
        ],
    }


# CI's smoke run: two short steps, only to show that the ladder and the check work.
QUICK = CapacityMode(
    start=20_000, factor=2.0, bisections=0, warmup_s=3.0, settle_s=2.0, window_s=5.0, max_steps=2
)
