"""bench/run.py's report: the headline of a results file, its Markdown tables (latest.md) and
its figure (bench/plot.py, drawn with matplotlib from a virtualenv of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.harness.common import say
from bench.harness.modes import INTERVAL_MS, PARALLELISM, PARTITIONS, PEERS
from bench.harness.steady import drain_notes
from bench.harness.venvs import cached_venv

# matplotlib draws the figure; never a dependency of the project (see plot_python).
MATPLOTLIB = "3.10.8"
MATPLOTLIB_VENV = Path.home() / ".cache" / "processor" / f"bench-matplotlib-{MATPLOTLIB}"
PLOT = Path(__file__).resolve().parents[1] / "plot.py"


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
        "The highest rate of a live producer (a JVM, bench/harness/loadgen.py) at which the lag of "
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
    out += _steady_run_notes(steady)
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


def _steady_run_notes(steady: dict[str, Any]) -> list[str]:
    """The runs whose figure is not a full window's: the input ran out (measured up to its
    end; from the first commit if the window had too few samples; a late final commit left
    out), or the run failed (a stall, an exit), with the reason."""
    notes: list[str] = []
    for key, row in steady["rows"].items():
        for i, run in enumerate(row["runs"]):
            if not run.get("ok"):
                notes.append(f"* {key} run {i + 1}: not ok: {run.get('error')}")
            elif drain_notes(run):
                notes.append(f"* {key} run {i + 1}: {'; '.join(drain_notes(run))}")
    if not notes:
        return []
    return [
        "",
        "Runs with no plain window (the input ran out: the slope up to its end, a final "
        "commit delayed while the system sat idle left out; progress flat at the window's "
        "end, waited out and kept in; or the run failed):",
        "",
        *notes,
    ]


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


def headline(report: dict[str, Any]) -> dict[str, Any]:
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
