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


def verdict(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """tie when the ranges overlap, else win or loss (of processor)."""
    if ours["events_per_s_median"] is None or theirs["events_per_s_median"] is None:
        return None
    if ours["events_per_s_min"] > theirs["events_per_s_max"]:
        return "win"
    if ours["events_per_s_max"] < theirs["events_per_s_min"]:
        return "loss"
    return "tie"


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
    comparison: dict[str, Any] = {}
    ratios = []
    for query, engines in results.items():
        if not set(ENGINES) <= set(engines):
            continue
        ours, theirs = engines["processor"], engines["flink"]
        if ours["events_per_s_median"] is None or not theirs["events_per_s_median"]:
            comparison[query] = {"ratio": None, "verdict": None}
            continue
        ratio = ours["events_per_s_median"] / theirs["events_per_s_median"]
        ratios.append(ratio)
        comparison[query] = {"ratio": round(ratio, 3), "verdict": verdict(ours, theirs)}
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    return {
        "results": results,
        "comparison": comparison,
        "geomean_ratio": round(geomean, 3) if geomean else None,
        "geomean_queries": len(ratios),
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(markdown(json.loads(Path(args[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
