"""The benchmark's figure: throughput over time, checkpoints, the recovery kill, state scaling.

    python bench/plot.py bench/results/<timestamp>.json [OUT.png]

Reads a results file of bench/run.py and writes a PNG (default: next to it, same name). Only
the standard library and matplotlib (Agg backend): bench/run.py runs this file with an
interpreter that has matplotlib, the current one if it can import it, otherwise a virtualenv
of its own at ``~/.cache/processor/bench-matplotlib-<version>`` (created on first use, like
the Quix Streams one), so that matplotlib never becomes a dependency of the project.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLORS = {"processor": "#1f77b4", "kafka_streams": "#d62728", "quix": "#2ca02c", "flink": "#9467bd"}
LABELS = {
    "processor": "processor",
    "kafka_streams": "Kafka Streams",
    "quix": "Quix Streams",
    "flink": "Flink",
}


def _smoothed(points: list[list[float]], window_s: float) -> tuple[list[float], list[float]]:
    """Words/s over the trailing ``window_s``: the output of a system that commits every
    second lands in one 0.5 s sample or the next, all or nothing."""
    ends = [t for t, _ in points]
    xs: list[float] = []
    ys: list[float] = []
    for i, t in enumerate(ends):
        total = span = 0.0
        j = i
        while j >= 0 and ends[j] > t - window_s + 1e-9:
            dt = ends[j] - (ends[j - 1] if j > 0 else ends[j] - 0.5)
            total += points[j][1] * dt
            span += dt
            j -= 1
        xs.append(t)
        ys.append(total / span if span else 0.0)
    return xs, ys


def _markers(ax: Any, times: list[float], color: str, label: str, style: str = ":") -> None:
    for i, t in enumerate(times):
        ax.axvline(t, color=color, linestyle=style, linewidth=0.9, label=label if i == 0 else None)


def _no_data(ax: Any, title: str, text: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def _throughput_all(ax: Any, report: dict[str, Any]) -> None:
    ax.set_title(
        "Throughput phase (full backlog): committed words/s, 1 s trailing average", fontsize=10
    )
    for name, result in report["systems"].items():
        points = result.get("timeline", {}).get("rates") or []
        if not points:
            continue
        xs, ys = _smoothed(points, 1.0)
        label = f"{LABELS.get(name, name)} ({result.get('words_per_s') or 0:,.0f} words/s)"
        ax.plot(xs, ys, color=COLORS.get(name), linewidth=1.4, label=label)
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=-1)
    ax.set_xlabel("seconds since the system consumed its first input record")
    ax.set_ylabel("committed words/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")


def _throughput_ours(ax: Any, report: dict[str, Any]) -> None:
    ours = report["systems"].get("processor", {})
    timeline = ours.get("timeline", {})
    points = timeline.get("rates") or []
    title = "processor, throughput phase: committed words/s per 0.5 s and its checkpoints"
    if not points:
        _no_data(ax, title, "no timeline")
        return
    ax.set_title(title, fontsize=10)
    xs = [t for t, _ in points]
    ax.step(xs, [r for _, r in points], where="pre", color=COLORS["processor"], linewidth=1.2)
    checkpoints = timeline.get("checkpoints") or []
    _markers(ax, [c["triggered_at"] for c in checkpoints], "gray", "checkpoint triggered", "--")
    _markers(ax, [c["completed_at"] for c in checkpoints], "black", "checkpoint completed")
    last = max(xs[-1], max((c["completed_at"] for c in checkpoints), default=0))
    ax.set_xlim(-0.5, last + 0.5)
    ax.set_xlabel("seconds since the first input record was consumed")
    ax.set_ylabel("committed words/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")


def _recovery(ax: Any, report: dict[str, Any]) -> None:
    recovery = report.get("recovery") or {}
    timeline = recovery.get("timeline") or {}
    points = timeline.get("rates") or []
    title = "processor, recovery: SIGKILL of worker-0 (restarted at once)"
    if not points:
        why = recovery.get("error") or "no recovery phase in this run (quick mode)"
        _no_data(ax, title, why)
        return
    recovered = recovery.get("recovery_s")
    ax.set_title(f"{title}: recovered in {recovered:.2f} s" if recovered else title, fontsize=10)
    xs = [t for t, _ in points]
    ax.step(xs, [r for _, r in points], where="pre", color=COLORS["processor"], linewidth=1.0)
    _markers(ax, timeline.get("checkpoints_completed") or [], "black", "checkpoint completed")
    kills = timeline.get("kills") or []
    _markers(ax, kills, "red", "SIGKILL worker-0", "-")
    if recovered:
        for k in kills:
            ax.axvspan(k, k + recovered, color="red", alpha=0.12, label="until recovered")
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("committed words/s (0.5 s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")


def _scaling_durations(ax: Any, report: dict[str, Any]) -> None:
    scaling = report.get("state_scaling") or {}
    title = "processor, checkpoint duration vs state size: build (backlog), then trickle"
    runs = [(int(k), v) for k, v in scaling.items() if v.get("timeline")]
    if not runs:
        _no_data(ax, title, "no state-scaling phase in this run")
        return
    ax.set_title(title, fontsize=10)
    for i, (keys, run) in enumerate(sorted(runs)):
        color = f"C{i + 4}"
        s = run.get("steady", {})
        label = (
            f"{keys:,} keys; steady p50 {s.get('duration_ms_p50') or 0:,.0f} ms, "
            f"p99 {s.get('duration_ms_p99') or 0:,.0f} ms"
        )
        # Plotted at the trigger: a checkpoint's duration is what its trigger waited for.
        points = [(c["t"] - c["duration_ms"] / 1000, c["duration_ms"]) for c in run["timeline"]]
        ax.plot(
            [t for t, _ in points],
            [d for _, d in points],
            marker="o",
            markersize=3,
            linewidth=1,
            color=color,
            label=label,
        )
        window = run.get("trickle_window_s")
        if window:
            ax.axvline(window[0], color=color, linestyle="--", linewidth=0.9)
    ax.plot(
        [], [], color="gray", linestyle="--", linewidth=0.9, label="state built: trickle begins"
    )
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the job consumed its first input record (checkpoint trigger)")
    ax.set_ylabel("checkpoint duration, trigger to last ack (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")


def _scaling_bytes(ax: Any, report: dict[str, Any]) -> None:
    scaling = report.get("state_scaling") or {}
    title = "processor, per steady checkpoint: uploaded (incremental) vs full snapshot"
    runs = [(int(k), v) for k, v in scaling.items() if (v.get("steady") or {}).get("completed")]
    if not runs:
        _no_data(ax, title, "no state-scaling phase in this run")
        return
    ax.set_title(title, fontsize=10)
    runs.sort()
    labels = [f"{keys:,} keys" for keys, _ in runs]
    xs = list(range(len(runs)))
    width = 0.27
    mb = 1e6
    series = [
        ("uploaded p50", [r["steady"]["uploaded_bytes_p50"] / mb for _, r in runs], "C0"),
        ("uploaded max", [r["steady"]["uploaded_bytes_max"] / mb for _, r in runs], "C1"),
        ("full snapshot p50", [r["steady"]["full_bytes_p50"] / mb for _, r in runs], "C7"),
    ]
    for j, (label, values, color) in enumerate(series):
        bars = ax.bar([x + (j - 1) * width for x in xs], values, width, label=label, color=color)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7)
    ax.set_xticks(xs, labels)
    ax.set_yscale("log")
    ax.set_ylabel("MB per checkpoint (all keyed tasks)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper left")


def render(report: dict[str, Any], out: Path) -> None:
    import matplotlib  # type: ignore[import-not-found, unused-ignore]

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    fig = plt.figure(figsize=(15, 13), dpi=100)
    grid = fig.add_gridspec(3, 2, hspace=0.38, wspace=0.18)
    _throughput_all(fig.add_subplot(grid[0, 0]), report)
    _throughput_ours(fig.add_subplot(grid[0, 1]), report)
    _recovery(fig.add_subplot(grid[1, :]), report)
    _scaling_durations(fig.add_subplot(grid[2, 0]), report)
    _scaling_bytes(fig.add_subplot(grid[2, 1]), report)
    mode = report.get("mode", {})
    fig.suptitle(
        f"Benchmark {report.get('timestamp')} ({mode.get('name')} mode, "
        f"{mode.get('words', 0):,} words per system; {report.get('machine')})",
        fontsize=12,
    )
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def render_latency(report: dict[str, Any], out: Path) -> bool:
    """Latency against the checkpoint/commit interval: p50 (solid) and p99 (dashed) per
    system, one panel per input rate; False when the report has fewer than two intervals."""
    sweep: dict[str, Any] = report.get("latency_by_interval") or {}
    intervals = sorted(sweep, key=int)
    if len(intervals) < 2:
        return False
    import matplotlib  # type: ignore[import-not-found, unused-ignore]

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    keys = sorted({k for i in intervals for k in sweep[i]}, key=lambda k: (k == "half_max", k))
    fig, axes = plt.subplots(1, len(keys), figsize=(7 * len(keys), 5.5), dpi=100, squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        systems = sorted({n for i in intervals for n in sweep[i].get(key, {})})
        for name in systems:
            xs, p50, p99 = [], [], []
            for i in intervals:
                r = sweep[i].get(key, {}).get(name, {})
                if "p99_ms" in r:
                    xs.append(int(i))
                    p50.append(r["p50_ms"])
                    p99.append(r["p99_ms"])
            if not xs:
                continue
            color = COLORS.get(name, "gray")
            label = LABELS.get(name, name)
            ax.plot(xs, p50, "o-", color=color, label=f"{label} p50")
            ax.plot(xs, p99, "s--", color=color, label=f"{label} p99")
        xs_all = [int(i) for i in intervals]
        ax.plot(xs_all, [x + 300 for x in xs_all], ":", color="gray", label="interval + 300 ms")
        title = (
            "half of each system's steady-state rate"
            if key == "half_max"
            else (f"{int(key):,} words/s")
        )
        ax.set_title(f"latency per input line at {title}", fontsize=10)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs_all, [str(x) for x in xs_all])
        ax.set_xlabel("checkpoint / commit interval (ms)")
        ax.set_ylabel("ms until the line's counts are in the committed output")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(f"Latency against the interval, benchmark {report.get('timestamp')}")
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return True


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else source.with_suffix(".png")
    report = json.loads(source.read_text())
    render(report, out)
    render_latency(report, out.with_name(f"{out.stem}-latency.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
