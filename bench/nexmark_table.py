"""A Nexmark results file (bench/nexmark.py) summarised, and its markdown table for
docs/figures.md.

    python bench/nexmark_table.py bench/results/nexmark-<stamp>.json

Per query and engine, over the runs that were exact (a run only counts if its output equals
the definition's): the median events/s and its range [min-max], the median CPU s per M
events of the job and of the broker, the median output records per M events. Per query the
ratio processor / flink of the medians and a verdict: a tie when the two ranges overlap (a
difference within the ranges), else a win or a loss for processor. Over the queries both
engines have figures for, the geometric mean of the ratios. One file is one sitting on one
machine: its figures are never joined with another's.

A live results file (``nexmark-live-<stamp>.json``, ``bench/nexmark.py --phase live``) gets
its own table (`live_markdown`): per query each engine's balanced live capacity (median
[min-max] of the exact runs), the ratio and verdict, and p50 / p99 latency at half of the
lower engine's capacity (medians of the runs' figures [ranges]).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ENGINES = ("processor", "flink")


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def engine_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One query's and engine's runs: the exact ones' figures."""
    exact = [r for r in runs if r.get("exact") and r.get("events_per_s")]
    rates = [float(r["events_per_s"]) for r in exact]
    return {
        "runs": len(runs),
        "exact_runs": len(exact),
        "all_exact": bool(runs) and len(exact) == len(runs),
        "events_per_s": [r.get("events_per_s") for r in runs],
        "events_per_s_median": _median(rates),
        "events_per_s_min": min(rates) if rates else None,
        "events_per_s_max": max(rates) if rates else None,
        "job_cpu_s_per_m_events": _median([r["job_cpu_s_per_m_events"] for r in exact]),
        "broker_cpu_s_per_m_events": _median([r["broker_cpu_s_per_m_events"] for r in exact]),
        "output_records_per_m_events": _median([r["output_records_per_m_events"] for r in exact]),
        "load_1m": [r.get("load_1m") for r in runs],
    }


def verdict(
    ours: dict[str, Any], theirs: dict[str, Any], field: str = "events_per_s"
) -> str | None:
    """tie when the ranges of ``field`` (its ``_median``, ``_min``, ``_max``) overlap, else
    win or loss (of processor)."""
    if ours[f"{field}_median"] is None or theirs[f"{field}_median"] is None:
        return None
    if ours[f"{field}_min"] > theirs[f"{field}_max"]:
        return "win"
    if ours[f"{field}_max"] < theirs[f"{field}_min"]:
        return "loss"
    return "tie"


def compare(
    results: dict[str, dict[str, Any]], field: str
) -> tuple[dict[str, Any], float | None, int]:
    """Per query the ratio processor / flink of ``field``'s medians and its `verdict`; the
    geometric mean of the ratios and how many there are."""
    comparison: dict[str, Any] = {}
    ratios = []
    for query, engines in results.items():
        if not set(ENGINES) <= set(engines):
            continue
        ours, theirs = engines["processor"], engines["flink"]
        if ours[f"{field}_median"] is None or not theirs[f"{field}_median"]:
            comparison[query] = {"ratio": None, "verdict": None}
            continue
        ratio = ours[f"{field}_median"] / theirs[f"{field}_median"]
        ratios.append(ratio)
        comparison[query] = {"ratio": round(ratio, 3), "verdict": verdict(ours, theirs, field)}
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    return comparison, round(geomean, 3) if geomean else None, len(ratios)


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """``results`` per query and engine, ``comparison`` per query, ``geomean_ratio``."""
    results: dict[str, dict[str, Any]] = {}
    for query in report["queries"]:
        results[query] = {
            engine: engine_summary(
                [r for r in report["runs"] if r["query"] == query and r["engine"] == engine]
            )
            for engine in report["engines"]
        }
    comparison, geomean, count = compare(results, "events_per_s")
    return {
        "results": results,
        "comparison": comparison,
        "geomean_ratio": geomean,
        "geomean_queries": count,
    }


def _rate(figures: dict[str, Any]) -> str:
    if figures["events_per_s_median"] is None:
        return f"- (0 of {figures['runs']} exact)"
    text = (
        f"{figures['events_per_s_median']:,.0f} "
        f"[{figures['events_per_s_min']:,.0f}-{figures['events_per_s_max']:,.0f}]"
    )
    if not figures["all_exact"]:
        text += f" ({figures['exact_runs']} of {figures['runs']} exact)"
    return text


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def markdown(report: dict[str, Any]) -> str:
    """The table: per query, each engine's median events/s [min-max], the ratio and the
    verdict, CPU s per M events (job / broker) and output records per M events."""
    summary = summarize(report)
    engines = [e for e in ENGINES if e in report["engines"]]
    machine = report.get("machine", {})
    head = (
        f"Nexmark, backlog of {report['events']:,} events (the nexmark crate's), "
        f"{report['partitions']} partitions; sitting {report['timestamp']} on "
        f"{machine.get('cpu_model', '?')}, {machine.get('nproc', '?')} cores, "
        f"{machine.get('mem_total_mb', '?')} MB; medians of exact runs [min-max], "
        f"{report['runs_requested']} interleaved runs requested"
    )
    columns = ["query"]
    for engine in engines:
        columns.append(f"{engine} events/s")
    if len(engines) == 2:
        columns += ["ratio", "verdict"]
    for engine in engines:
        columns += [f"{engine} CPU s/M events (job / broker)", f"{engine} output/M events"]
    lines = [head, "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for query, figures in summary["results"].items():
        cells = [query] + [_rate(figures[e]) for e in engines]
        if len(engines) == 2:
            compared = summary["comparison"].get(query, {})
            ratio = compared.get("ratio")
            cells += ["-" if ratio is None else f"{ratio:.2f}x", compared.get("verdict") or "-"]
        for engine in engines:
            f = figures[engine]
            cpu = f"{_num(f['job_cpu_s_per_m_events'])} / {_num(f['broker_cpu_s_per_m_events'])}"
            cells += [cpu, _num(f["output_records_per_m_events"])]
        lines.append("| " + " | ".join(cells) + " |")
    if summary["geomean_ratio"] is not None:
        lines += [
            "",
            f"Geometric mean of the ratios (processor / flink) over {summary['geomean_queries']} "
            f"queries: {summary['geomean_ratio']:.2f}x",
        ]
    return "\n".join(lines)


# -- the live phase (bench/nexmark_live.py) ------------------------------------------------


def _range(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """(median, min, max), or Nones."""
    if not values:
        return None, None, None
    return round(statistics.median(values), 1), min(values), max(values)


def live_engine_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One query's and engine's live runs: the capacity of the exact capacity runs, the
    latency of the exact latency runs (medians over the runs of each run's p50 and p99)."""
    caps = [r for r in runs if r.get("kind") == "cap"]
    lats = [r for r in runs if r.get("kind") == "lat"]
    good = [
        float(r["capacity_events_per_s"])
        for r in caps
        if r.get("exact") and r.get("capacity_events_per_s")
    ]
    median, low, high = _range(good)
    measured = [
        r for r in lats if r.get("exact") and (r.get("latency") or {}).get("p50_ms") is not None
    ]
    p50 = _range([float(r["latency"]["p50_ms"]) for r in measured])
    p99 = _range([float(r["latency"]["p99_ms"]) for r in measured])
    cpu = [
        float(r["at_capacity"]["job_cpu_s_per_m_events"])
        for r in caps
        if r.get("exact") and (r.get("at_capacity") or {}).get("job_cpu_s_per_m_events") is not None
    ]
    return {
        "capacity_runs": len(caps),
        "capacity_exact_runs": sum(1 for r in caps if r.get("exact")),
        "capacity": [r.get("capacity_events_per_s") for r in caps],
        "capacity_median": median,
        "capacity_min": low,
        "capacity_max": high,
        "file_exhausted": any(r.get("file_exhausted") for r in caps),
        # A step the replayer could not send at its rate: its limit, not the engine's.
        "replayer_limited": any(
            s.get("producer_limited") for r in caps for s in r.get("steps") or []
        ),
        "job_cpu_s_per_m_events_at_capacity": _range(cpu)[0],
        "latency_runs": len(lats),
        "latency_exact_runs": sum(1 for r in lats if r.get("exact")),
        "latency_rate": next((r.get("rate") for r in lats if r.get("rate")), None),
        "p50_ms_median": p50[0],
        "p50_ms_range": list(p50[1:]) if p50[0] is not None else None,
        "p99_ms_median": p99[0],
        "p99_ms_range": list(p99[1:]) if p99[0] is not None else None,
    }


def summarize_live(report: dict[str, Any]) -> dict[str, Any]:
    """``live_results`` per query and engine, ``live_comparison`` per query (capacity ratio
    processor / flink and its verdict: a tie when the ranges overlap), ``live_geomean_ratio``."""
    results = {
        query: {
            engine: live_engine_summary(
                [r for r in report["runs"] if r["query"] == query and r["engine"] == engine]
            )
            for engine in report["engines"]
        }
        for query in report["queries"]
    }
    comparison, geomean, count = compare(results, "capacity")
    return {
        "live_results": results,
        "live_comparison": comparison,
        "live_geomean_ratio": geomean,
        "live_geomean_queries": count,
    }


def _capacity(f: dict[str, Any]) -> str:
    if f["capacity_median"] is None:
        return f"- (0 of {f['capacity_runs']} exact)"
    text = f"{f['capacity_median']:,.0f} [{f['capacity_min']:,.0f}-{f['capacity_max']:,.0f}]"
    if f["capacity_exact_runs"] != f["capacity_runs"]:
        text += f" ({f['capacity_exact_runs']} of {f['capacity_runs']} exact)"
    text += " (file ran out)" if f["file_exhausted"] else ""
    return text + (" (replayer-limited)" if f["replayer_limited"] else "")


def _latency(f: dict[str, Any]) -> str:
    if f["p50_ms_median"] is None:
        return "-"
    p50, p99 = f["p50_ms_range"], f["p99_ms_range"]
    return (
        f"{f['p50_ms_median']:,.0f} [{p50[0]:,.0f}-{p50[1]:,.0f}] / "
        f"{f['p99_ms_median']:,.0f} [{p99[0]:,.0f}-{p99[1]:,.0f}] "
        f"({f['latency_exact_runs']} of {f['latency_runs']} runs)"
    )


def live_markdown(report: dict[str, Any]) -> str:
    """The live table: per query, each engine's balanced live capacity (median [min-max] of
    the exact runs), the ratio and verdict, and each engine's p50 / p99 latency (ms, medians
    of the runs [ranges]) at the one rate, half of the lower engine's capacity."""
    summary = summarize_live(report)
    engines = [e for e in ENGINES if e in report["engines"]]
    machine = report.get("machine", {})
    head = (
        f"Nexmark live, the nexmark crate's events replayed from a file of "
        f"{report['events']:,}, {report['partitions']} partitions; sitting "
        f"{report['timestamp']} on {machine.get('cpu_model', '?')}, "
        f"{machine.get('nproc', '?')} cores, {machine.get('mem_total_mb', '?')} MB"
        + (" (quick: not a measurement)" if report.get("quick") else "")
    )
    columns = ["query"] + [f"{e} capacity events/s" for e in engines]
    if len(engines) == 2:
        columns += ["ratio", "verdict"]
    columns.append("latency rate events/s")
    columns += [f"{e} p50 / p99 ms" for e in engines]
    lines = [head, "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for query, figures in summary["live_results"].items():
        cells = [query] + [_capacity(figures[e]) for e in engines]
        if len(engines) == 2:
            compared = summary["live_comparison"].get(query, {})
            ratio = compared.get("ratio")
            cells += ["-" if ratio is None else f"{ratio:.2f}x", compared.get("verdict") or "-"]
        rate = next(
            (figures[e]["latency_rate"] for e in engines if figures[e]["latency_rate"]), None
        )
        cells.append("-" if rate is None else f"{rate:,}")
        cells += [_latency(figures[e]) for e in engines]
        lines.append("| " + " | ".join(cells) + " |")
    if summary["live_geomean_ratio"] is not None:
        lines += [
            "",
            f"Geometric mean of the capacity ratios (processor / flink) over "
            f"{summary['live_geomean_queries']} queries: {summary['live_geomean_ratio']:.2f}x",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    report = json.loads(Path(args[0]).read_text())
    print(live_markdown(report) if report.get("phase") == "live" else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
