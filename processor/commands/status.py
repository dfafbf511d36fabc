"""``processor status``: the coordinator's status page, in the terminal."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any


class StatusUnavailable(Exception):
    """No coordinator answered."""


def fetch(url: str, timeout: float = 5) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=timeout) as page:
            doc: dict[str, Any] = json.load(page)
            return doc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StatusUnavailable(f"no coordinator answers at {url} ({exc})") from None


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def render(doc: dict[str, Any], history: int = 10) -> str:
    chk = doc.get("checkpoints", {})
    lines = [
        f"job {doc.get('job')}: last completed checkpoint {chk.get('last_completed')} "
        f"(completed {chk.get('completed', 0)}, failed {chk.get('failed', 0)}, "
        f"in progress {len(chk.get('in_progress', []))}), lag {doc.get('lag')} records",
        "",
        f"{'checkpoint':>10}  {'status':<9} {'at':<8} {'duration':>9} {'uploaded':>10} "
        f"{'full size':>10}  slowest task / reason",
    ]
    for c in chk.get("history", [])[:history]:
        at = time.strftime("%H:%M:%S", time.localtime(c["at"])) if c.get("at") else "-"
        duration = f"{c['duration_s']:.3f}s" if c.get("duration_s") is not None else "-"
        lines.append(
            f"{c['id']:>10}  {c.get('status', ''):<9} {at:<8} {duration:>9} "
            f"{_size(c.get('size_bytes')):>10} {_size(c.get('full_size_bytes')):>10}  "
            f"{c.get('slowest_task') or c.get('reason') or ''}"
        )
    stages = doc.get("stages", [])
    if stages:
        width = max(10, *(len(st["stage"]) for st in stages))
        lines += ["", f"{'stage':<{width}} {'kind':<7} {'tasks':>5}  input -> operators"]
        for st in stages:
            lines.append(
                f"{st['stage']:<{width}} {st.get('kind', ''):<7} {st.get('tasks', 0):>5}  "
                f"{st.get('input', '')} -> {' -> '.join(st.get('operators', []))}"
            )
    tasks = doc.get("tasks", [])
    timed = any(t.get("watermark_ms") is not None for t in tasks)
    width = max(10, *(len(t["task"]) for t in tasks)) if tasks else 10
    lines += [
        "",
        f"{'task':<{width}} {'worker':<20} {'state':<9} {'checkpoint':>10} {'lag':>8}"
        + ("  event-time lag" if timed else ""),
    ]
    for t in tasks:
        lag = "-" if t.get("lag") is None else str(t["lag"])
        lines.append(
            f"{t['task']:<{width}} {t.get('worker') or '-':<20} {t.get('state', ''):<9} "
            f"{t.get('checkpoint', 0):>10} {lag:>8}"
            + (f"  {_seconds(t.get('event_time_lag_s'))}" if timed else "")
        )
        if t.get("reason"):
            lines.append(f"  {t['task']} stopped for good: {t['reason']}")
    lines += ["", f"{'worker':<20} {'heartbeat':>10} {'tasks':>6}"]
    for w in doc.get("workers", []):
        lines.append(f"{w['worker']:<20} {w['last_seen_s']:>9.1f}s {w.get('tasks', 0):>6}")
    return "\n".join(lines)


def _seconds(value: object) -> str:
    return f"{value:.1f} s" if isinstance(value, int | float) else "-"


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from processor.commands.base import COORDINATOR_URL

    parser.add_argument("--url", default=COORDINATOR_URL, help="coordinator's metrics URL")
    parser.add_argument("--history", type=int, default=10, help="checkpoints to show")


def run(args: argparse.Namespace) -> int:
    """``processor status``: the coordinator's status document, as text."""
    try:
        print(render(fetch(args.url), args.history))
    except StatusUnavailable as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 1
    return 0
