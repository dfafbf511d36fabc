"""The highest input rate each system sustains live on this machine, and its latency at half.

bench/run.py's steady state measures throughput on a backlog, with nothing else running. A live
rate is different: the input is produced while the system runs, by a process
(bench/harness/measure.py RateProducer) that shares the machine's two cores with it, as it
would in production where the producers run beside the job. So "the highest sustainable
rate" is searched for live:

* a ladder of rates, each 1.5x the previous one from ``--start`` (per system), every rung a
  fresh job on fresh topics with ``--warmup-s`` + ``--seconds`` of input at that rate and the
  checkpoint/commit interval at 1 s (down the ladder instead if the first rung does not keep
  up); then two bisection steps (geometric means) between the highest rung kept up and the
  lowest one not;
* a rung is kept up when the output is exact, the producer kept the rate (never more than
  0.5 s behind, at least 95 % of the words/s asked), and the latency did not keep rising: its
  least-squares slope over the send times of the measured lines is at most 0.03 s per s (a
  system that falls short of the rate by x % of its capacity gains about x %), and its median
  is at most 5 s (a backlog left from the warm-up and never drained is not keeping up).
  This is the sustainable throughput of Karimov et al., "Benchmarking Distributed Stream Data
  Processing Systems" (ICDE 2018): the highest load without a latency that keeps rising,
  bounded here because a JVM's warm-up (its JIT) can leave a backlog that a system at its
  limit carries through the whole run without the latency rising further.

The broker is warmed up first by one unrecorded run: a fresh broker's JIT compiles for its
first ~40 s at up to half a core, which the first rung would otherwise pay for. The thresholds
of "kept up" are written into the results file (``mode.kept_up_when``).

Then each system runs at half its highest sustained rate at every interval of ``--intervals``,
``--runs`` times (default 3; every system's points in one shuffled order): the issue's target
is a p99 of at most the interval + 300 ms there. A point reports the median of its runs' p50s
and p99s, their ranges, and every run. ``--sustained SYSTEM=RATE`` skips a system's search
and uses a rate found before.

    python bench/sustainable.py                        # every system but Quix: ~65 minutes
    python bench/sustainable.py --systems processor --intervals 1000
    python bench/sustainable.py --sustained processor=1020000 --sustained flink=150000 \
        --sustained kafka_streams=180000                # the half-rate points only: ~40 min

Starts its own broker (``--port``, default 29292). Writes
``bench/results/<timestamp>-sustainable.json`` and a markdown table on stderr; the last stdout
line is the JSON summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import say
from bench.harness.latency_phase import latency
from bench.harness.modes import FULL, PEERS, RESULTS, Mode
from bench.harness.phases import BrokerDied
from bench.harness.provenance import terminate_as_interrupt
from processor.localkafka.broker import LocalBroker

SEARCH_INTERVAL_MS = 1000
# Where each system's ladder starts (words/s): well below what it sustains, a few rungs up.
START = {"processor": 200_000, "kafka_streams": 50_000, "flink": 50_000, "quix": 5_000}
FACTOR = 1.5
BISECTIONS = 2
# Latency gained per second of the run, at most: a system short of the rate by x % of its
# capacity gains about x % (its backlog grows by the shortfall, drained at its capacity).
MAX_GROWTH = 0.03
# And a standing backlog (one built during the warm-up, that the system never drains) of more
# than this, at the median, is not keeping up either: a live job would be alerting by then.
MAX_P50_MS = 5000.0
MAX_BEHIND_S = 0.5
MIN_ACHIEVED = 0.95
MIN_RATE = 1000  # the ladder goes no lower
# A fresh broker's JIT compiles for its first ~40 s at up to half a core (seen per thread):
# the first rung would pay for it.
BROKER_WARMUP = "one unrecorded run of the first system at its starting rate"


def kept_up(result: dict[str, Any]) -> tuple[bool, str]:
    """Whether a rung's run kept up with its rate, and if not, why."""
    if "error" in result:
        return False, str(result["error"])[:200]
    rate = result["rate_words_per_s"]
    if result.get("producer_max_behind_s", 0) > MAX_BEHIND_S:
        return False, f"the producer fell {result['producer_max_behind_s']} s behind"
    achieved = result.get("achieved_words_per_s") or 0
    if achieved < MIN_ACHIEVED * rate:
        return False, f"the producer reached only {achieved:,} words/s"
    growth = result.get("latency_growth")
    if growth is None:
        return False, "no latency figures"
    if growth > MAX_GROWTH:
        return False, f"latency grew by {growth:.3f} s per s (a backlog building up)"
    if result.get("p50_ms", math.inf) > MAX_P50_MS:
        return False, f"a standing backlog: p50 {result.get('p50_ms')} ms"
    return True, "kept up"


def find_rate(start: int, attempt: Callable[[int], bool]) -> tuple[int, int]:
    """The highest rate ``attempt`` kept up and the lowest it did not (0: none of either).

    Up the ladder from ``start`` while rungs keep up; if the first one does not, down it
    (rates 1.5x apart, not below MIN_RATE) until one does. Then BISECTIONS geometric means
    between the two."""
    good, bad = 0, 0
    rate = start
    if attempt(rate):
        good = rate
        while True:
            rate = int(round(rate * FACTOR, -4))
            if not attempt(rate):
                bad = rate
                break
            good = rate
    else:
        bad = rate
        while rate > MIN_RATE:
            rate = max(MIN_RATE, int(round(rate / FACTOR, -3)))
            if attempt(rate):
                good = rate
                break
            bad = rate
    if good:
        for _ in range(BISECTIONS):
            middle = int(round(math.sqrt(good * bad), -4 if good >= 100_000 else -3))
            if middle in (good, bad):
                break
            if attempt(middle):
                good = middle
            else:
                bad = middle
    return good, bad


def search(
    peer: Any, broker: LocalBroker, mode: Mode, workdir: Path, run_id: str, start: int
) -> dict[str, Any]:
    """The ladder, then the bisection; ``sustained`` is the highest rate kept up (0: none)."""
    rungs: list[dict[str, Any]] = []

    def attempt(rate: int) -> bool:
        result = _run(peer, broker, rate, mode, workdir, run_id, SEARCH_INTERVAL_MS)
        ok, why = kept_up(result)
        say(f"{peer.name}: {rate:,} words/s: {why}")
        rungs.append({"rate": rate, "kept_up": ok, "why": why, "result": result})
        return ok

    good, bad = find_rate(start, attempt)
    return {"sustained": good, "first_not_kept_up": bad, "rungs": rungs}


def half_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One half-rate point over its runs: the median of each run's p50 and p99 (``p50_ms``,
    ``p99_ms``) and their ranges, over the runs that gave figures; every run under ``runs``."""
    good = [r for r in results if "p99_ms" in r]
    first = results[0]
    summary: dict[str, Any] = {
        "rate_words_per_s": first.get("rate_words_per_s"),
        "interval_ms": first.get("interval_ms"),
        "runs": results,
        "runs_with_figures": len(good),
    }
    for key in ("p50_ms", "p99_ms"):
        values = [float(r[key]) for r in good]
        if values:
            summary[key] = round(statistics.median(values), 1)
            summary[f"{key}_range"] = [min(values), max(values)]
    return summary


def run(
    names: list[str],
    intervals: list[int],
    mode: Mode,
    port: int,
    starts: dict[str, int],
    runs: int = 1,
    given: dict[str, int] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """``given``: systems whose highest sustained rate is known (no search); ``runs``: runs
    per half-rate point, all points of all systems in one shuffled order (``seed``), so that
    drift in the machine spreads over every system and interval alike."""
    given = given or {}
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = "s" + stamp.replace("-", "")
    tmp = Path(tempfile.mkdtemp(prefix="bench-sustainable-"))
    broker = LocalBroker(port=port, controller_port=port + 1, data_dir=tmp / "kafka")
    out = RESULTS / f"{stamp}-sustainable.json"
    report: dict[str, Any] = {
        "timestamp": stamp,
        "mode": {
            "warmup_s": mode.latency_warmup_s,
            "seconds": mode.latency_s,
            "search_interval_ms": SEARCH_INTERVAL_MS,
            "factor": FACTOR,
            "bisections": BISECTIONS,
            "starts": starts,
            "kept_up_when": {
                "producer_max_behind_s": MAX_BEHIND_S,
                "achieved_share_min": MIN_ACHIEVED,
                "latency_growth_max_s_per_s": MAX_GROWTH,
                "p50_ms_max": MAX_P50_MS,
            },
            "broker_warmup": BROKER_WARMUP,
            "runs_per_half_point": runs,
            "order_seed": seed,
            "sustained_given": given,
        },
        "systems": {},
    }
    peers = [PEERS[n]() for n in names]
    for peer in peers:
        say(f"preparing {peer.title}")
        peer.prepare()
    try:
        broker.start()  # SIGTERM unwinds (terminate_as_interrupt): the finally stops it
        say(f"warming the broker up: {BROKER_WARMUP}")
        first = peers[0]
        _run(first, broker, starts[first.name], mode, tmp, run_id, SEARCH_INTERVAL_MS, "w")
        points: list[tuple[Any, int, int]] = []
        for peer in peers:
            found: dict[str, Any]
            if peer.name in given:
                found = {"sustained": given[peer.name], "first_not_kept_up": 0, "rungs": []}
            else:
                found = search(peer, broker, mode, tmp, run_id, starts[peer.name])
            report["systems"][peer.name] = {**found, "settings": peer.settings(), "half": {}}
            _write(out, report)
            if _half(found["sustained"]):
                points += [(peer, i, k) for i in intervals for k in range(runs)]
        random.Random(seed).shuffle(points)
        results: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for peer, interval, k in points:
            half = _half(report["systems"][peer.name]["sustained"])
            # Its own topics: the half rate may equal a rung's.
            result = _run(peer, broker, half, mode, tmp, run_id, interval, f"h{k}")
            result["target_p99_ms"] = interval + 300
            say(
                f"{peer.name} at {half:,} words/s, {interval} ms, run {k + 1}: "
                f"p50 {result.get('p50_ms')} / p99 {result.get('p99_ms')} ms"
            )
            done = results.setdefault((peer.name, interval), [])
            done.append(result)
            point = half_summary(done)
            point["target_p99_ms"] = interval + 300
            report["systems"][peer.name]["half"][str(interval)] = point
            _write(out, report)
    except BrokerDied as exc:
        report["aborted"] = str(exc)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        _write(out, report)  # what was measured, even when interrupted
    print(markdown(report), file=sys.stderr)
    say(f"wrote {out}")
    return report


def _half(sustained: int) -> int:
    """Half a sustained rate, to the thousand (0: nothing sustained to halve)."""
    return int(round(sustained / 2, -3))


def _run(
    peer: Any,
    broker: LocalBroker,
    rate: int,
    mode: Mode,
    workdir: Path,
    run_id: str,
    interval: int,
    suffix: str = "",
) -> dict[str, Any]:
    """One latency run; a failure is its result (the search and the other systems go on)."""
    try:
        return latency(
            peer, broker, rate, mode, workdir, run_id, interval_ms=interval, tag_suffix=suffix
        )
    except BrokerDied:
        raise
    except Exception as exc:  # noqa: BLE001 - reported in the results
        traceback.print_exc()
        return {"rate_words_per_s": rate, "interval_ms": interval, "error": repr(exc)}


def _write(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| system | highest rate kept up | first not | interval | rate | p50 / p99 ms "
        "| target p99 | met |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, entry in report["systems"].items():
        for interval, r in entry["half"].items() or [("-", {})]:
            figures = (
                f"{r.get('p50_ms')} / {r.get('p99_ms')}"
                if "p99_ms" in r
                else str(r.get("error") or r.get("runs", [{}])[0].get("error", ""))
            )
            if "p99_ms_range" in r and r.get("runs_with_figures", 1) > 1:
                low, high = r["p99_ms_range"]
                figures += f" (p99 {low}-{high})"
            target = r.get("target_p99_ms")
            met = "yes" if target and r.get("p99_ms", math.inf) <= target else "no"
            lines.append(
                f"| {name} | {entry['sustained']:,} | {entry['first_not_kept_up']:,} "
                f"| {interval} | {r.get('rate_words_per_s', 0):,} | {figures} | {target} | {met} |"
            )
    return "\n".join(lines)


def summary(report: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "sustained_words_per_s": e["sustained"],
            "half": {
                i: {
                    k: r.get(k)
                    for k in (
                        "rate_words_per_s",
                        "p50_ms",
                        "p99_ms",
                        "p50_ms_range",
                        "p99_ms_range",
                        "target_p99_ms",
                    )
                }
                for i, r in e["half"].items()
            },
        }
        for name, e in report["systems"].items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="processor,flink,kafka_streams")
    parser.add_argument("--intervals", default="100,250,500,1000")
    parser.add_argument("--warmup-s", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--port", type=int, default=29292)
    parser.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="SYSTEM=RATE",
        help="where a system's ladder starts (words/s); defaults: "
        + ", ".join(f"{k}={v:,}" for k, v in START.items()),
    )
    parser.add_argument(
        "--sustained",
        action="append",
        default=[],
        metavar="SYSTEM=RATE",
        help="a system's highest sustained rate, known from an earlier run: no search",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per half-rate point")
    parser.add_argument("--seed", type=int, default=1, help="of the half-rate points' order")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = set(names) - PEERS.keys()
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; known: {list(PEERS)}")
    starts = dict(START)
    for item in args.start:
        name, _, value = item.partition("=")
        starts[name] = int(value)
    given = {}
    for item in args.sustained:
        name, _, value = item.partition("=")
        given[name] = int(value)
    mode = dataclasses.replace(FULL, latency_warmup_s=args.warmup_s, latency_s=args.seconds)
    started = time.time()
    with terminate_as_interrupt():
        intervals = [int(i) for i in args.intervals.split(",")]
        report = run(names, intervals, mode, args.port, starts, args.runs, given, args.seed)
    say(f"done in {time.time() - started:.0f} s")
    print(json.dumps(summary(report)), flush=True)
    return 1 if "aborted" in report else 0


if __name__ == "__main__":
    sys.exit(main())
