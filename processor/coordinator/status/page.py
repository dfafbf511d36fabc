"""The coordinator's status pages: ``/api/status`` (JSON) and ``/`` (HTML), beside the
endpoints every service has (`processor.endpoints`).

The coordinator loop publishes a fresh status document every heartbeat interval by swapping
one reference; the HTTP thread only ever reads the latest document, so no lock is needed.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from processor import endpoints
from processor.coordinator.status import svg as status_svg
from processor.health import LoopHealth
from processor.http_server import HttpServer, Request, Response


class StatusBoard:
    """Holds the latest status document."""

    def __init__(self, job: str) -> None:
        # The same shape as what the coordinator publishes, before it first does.
        self.document: dict[str, Any] = {
            "job": job,
            "updated_at": None,
            "checkpoints": {
                "last_completed": None,
                "in_progress": [],
                "completed": 0,
                "failed": 0,
                "history": [],
            },
            "tasks": [],
            "workers": [],
            "lag": None,
        }

    def publish(self, document: dict[str, Any]) -> None:
        self.document = document  # one reference swap: readers see the old or the new


# The status page's inline style and script, allowed by their hashes in its
# Content-Security-Policy and nothing else (no other script, style, frame or form).
PAGE_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; text-align: left; }
th { border-bottom: 1px solid #999; } tr:nth-child(even) { background: #f4f4f4; }
tr.failed td:nth-child(2) { color: #b00020; font-weight: bold; }
tr.completed td:nth-child(2) { color: #137333; }
.grid { display: flex; gap: 3em; flex-wrap: wrap; }
svg text { font-family: system-ui, sans-serif; }
.alert { border: 1px solid #b00020; background: #fce8e6; padding: 4px 12px; }
"""
PAGE_SCRIPT = """
setInterval(async () => {
  try {
    const page = await fetch(location.href, {cache: "no-store"});
    if (!page.ok) return;
    const doc = new DOMParser().parseFromString(await page.text(), "text/html");
    document.body.replaceWith(doc.body);
  } catch (e) {}  // the coordinator is away: keep what is shown, try again
}, 2000);
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


PAGE_CSP = (
    f"default-src 'none'; style-src {_csp_hash(PAGE_STYLE)}; "
    f"script-src {_csp_hash(PAGE_SCRIPT)}; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def serve(
    board: StatusBoard | None,
    host: str,
    port: int,
    health: LoopHealth | None = None,
    labels: Mapping[str, str] | None = None,
    token: str = "",
    state: Callable[[Request], Response | None] | None = None,
    hosts: frozenset[str] = frozenset(),
) -> HttpServer:
    """`processor.endpoints.serve` with the coordinator's pages: ``/api/status`` (JSON) and
    ``/`` (HTML) of ``board`` (None: a worker, which has none); ``state`` answers
    ``/state/...`` (`processor.query.forward`, with ``PROCESSOR_STATE_API=on``), off
    the server's loop as it waits for a worker, behind ``token`` as every page."""

    def pages(request: Request) -> Response | None:
        if state is not None and request.path.startswith("/state/"):
            return state(request)
        if board is None:
            return None
        if request.path == "/api/status":
            body = json.dumps(board.document, indent=1).encode()
            return Response(200, "application/json", body)
        if request.path in ("/", "/index.html"):
            page = render_html(board.document).encode()
            return Response(
                200, "text/html; charset=utf-8", page, [("Content-Security-Policy", PAGE_CSP)]
            )
        return Response(404, "text/plain", b"not found: try /, /api/status, /metrics or /healthz\n")

    slow = ("/state/",) if state is not None else ()
    return endpoints.serve(host, port, health, labels, token, pages, slow, hosts)


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt_watermark(ms: object) -> str | None:
    """An event-time watermark as UTC wall-clock time, to the millisecond."""
    if not isinstance(ms, int):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def _cell(value: object) -> str:
    return f"<td>{html.escape('-' if value is None else str(value))}</td>"


def _spark_cell(values: object, color: str) -> str:
    if not isinstance(values, list) or not values:
        return "<td>-</td>"
    return f"<td>{status_svg.sparkline([float(v) for v in values], color)}</td>"


def render_html(doc: dict[str, Any]) -> str:
    """A page an operator can read at a glance: the job's graph, the recent checkpoints as a
    chart, then the tables. Every 2 s it fetches itself again and swaps its body in (no full
    reload: the scroll position stays; with ``?token=`` in its address the fetch has it)."""
    job = html.escape(str(doc.get("job", "")))
    chk = doc.get("checkpoints", {})
    rows = "".join(_checkpoint_row(c) for c in chk.get("history", [])[:20])
    tasks = "".join(_task_row(t) for t in doc.get("tasks", []))
    stages = "".join(_stage_row(st) for st in doc.get("stages", []))
    workers = "".join(_worker_row(w) for w in doc.get("workers", []))
    alert = _alert(doc.get("tasks", []))
    summary = _summary(doc, chk)
    dashboard = _dashboard(doc.get("grafana_url"))
    return f"""<!doctype html>
<html><head><meta charset="utf-8">
<title>processor: {job}</title>
<style>{PAGE_STYLE}</style>
<script>{PAGE_SCRIPT}</script></head><body>
<h1>processor &mdash; job {job}</h1>
{alert}<p>{summary}{dashboard}</p>
<div class="grid">
<div><h2>Job graph</h2>{status_svg.job_graph(doc.get("stages", []))}</div>
<div><h2>Checkpoints, last hour</h2>
{status_svg.checkpoint_chart(chk.get("hour", []))}</div>
</div>
<div class="grid">
<div><h2>Stages</h2><table><tr><th>stage</th><th>kind</th><th>input</th><th>tasks</th>
<th>records/s</th><th>busy</th><th>operators</th></tr>{stages}</table>
<h2>Checkpoints (latest 20)</h2>
<table><tr><th>id</th><th>status</th><th>at</th><th>duration</th><th>uploaded</th>
<th>full size</th><th>slowest task / reason</th></tr>{rows}</table></div>
<div><h2>Tasks</h2><table><tr><th>task</th><th>worker</th><th>state</th>
<th>checkpoint</th><th>lag</th><th>records/s, 1 h</th><th>lag, 1 h</th>
<th>watermark (UTC)</th><th>event-time lag</th>
<th>failed for good / stopped because</th></tr>{tasks}</table>
<h2>Workers</h2><table><tr><th>worker</th><th>status</th><th>heartbeat</th>
<th>tasks</th></tr>{workers}</table></div>
</div>
<p><a href="/api/status">/api/status</a> &middot; <a href="/metrics">/metrics</a></p>
</body></html>
"""


def _checkpoint_row(c: dict[str, Any]) -> str:
    status = c.get("status", "")
    return (
        f'<tr class="{html.escape(status)}">'
        + _cell(c.get("id"))
        + _cell(status)
        + _cell(time.strftime("%H:%M:%S", time.localtime(c["at"])) if c.get("at") else None)
        + _cell(f"{c['duration_s']:.3f} s" if c.get("duration_s") is not None else None)
        + _cell(_fmt_bytes(c.get("size_bytes")))
        + _cell(_fmt_bytes(c.get("full_size_bytes")))
        + _cell(c.get("slowest_task") or c.get("reason"))
        + "</tr>"
    )


def _task_row(t: dict[str, Any]) -> str:
    return (
        "<tr>"
        + _cell(t["task"])
        + _cell(t.get("worker"))
        + _cell(t.get("state"))
        + _cell(t.get("checkpoint"))
        + _cell(t.get("lag"))
        + _spark_cell(t.get("hour", {}).get("records_per_s"), "#137333")
        + _spark_cell(t.get("hour", {}).get("lag"), "#b06000")
        + _cell(_fmt_watermark(t.get("watermark_ms")))
        + _cell(f"{t['event_time_lag_s']:.1f} s" if t.get("event_time_lag_s") is not None else None)
        + _cell(t.get("reason"))
        + "</tr>"
    )


def _stage_row(st: dict[str, Any]) -> str:
    return (
        "<tr>"
        + _cell(st.get("stage"))
        + _cell(st.get("kind"))
        + _cell(st.get("input"))
        + _cell(st.get("tasks"))
        + _cell(st.get("records_per_s"))
        + _cell(f"{float(st['busy']):.0%}" if st.get("busy") is not None else None)
        + _cell(" → ".join(st.get("operators", [])))
        + "</tr>"
    )


def _worker_row(w: dict[str, Any]) -> str:
    return (
        f'<tr class="{"completed" if w.get("alive") else "failed"}">'
        + _cell(w["worker"])
        + _cell("alive" if w.get("alive") else "dead")
        + _cell(f"{w['last_seen_s']:.1f} s ago" if w.get("last_seen_s") is not None else None)
        + _cell(w.get("tasks"))
        + "</tr>"
    )


def _alert(tasks: list[dict[str, Any]]) -> str:
    """Tasks that failed for good or stopped on a record: first thing on the page."""
    troubled = [t for t in tasks if t.get("state") in ("failed", "stopped")]
    if not troubled:
        return ""
    return (
        '<div class="alert"><b>'
        + html.escape(f"{len(troubled)} task(s) failed for good or stopped")
        + "</b><ul>"
        + "".join(
            f"<li>{html.escape(str(t['task']))}: {html.escape(str(t.get('reason') or t['state']))}"
            "</li>"
            for t in troubled
        )
        + "</ul></div>"
    )


def _dashboard(grafana: object) -> str:
    """A link to the job's Grafana dashboard, if one is set (an http(s) URL only)."""
    if isinstance(grafana, str) and grafana.startswith(("http://", "https://")):
        return f' &middot; <a href="{html.escape(grafana)}">Grafana</a>'
    return ""


def _summary(doc: dict[str, Any], chk: dict[str, Any]) -> str:
    return (
        f"last completed checkpoint <b>{html.escape(str(chk.get('last_completed', '-')))}</b>"
        f" &middot; completed {chk.get('completed', 0)} &middot; failed {chk.get('failed', 0)}"
        f" &middot; in progress {len(chk.get('in_progress', []))}"
        f" &middot; total lag <b>{doc.get('lag', '-')}</b> records"
    )
