"""The pictures of the coordinator's status page, as inline SVG (no script, no library): the
job's graph, stage by stage, with each stage's records/s, lag and tasks, and a loop's
feedback; and the recent checkpoints' durations and records.

Pure functions of the status document (`processor.runtime.job_status`), so a unit test reads
what an operator sees.
"""

from __future__ import annotations

import html
from typing import Any

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _PAD = 190, 62, 70, 24, 12


def job_graph(stages: list[dict[str, Any]]) -> str:
    """Stages left to right by depth (a stage after every one it reads from), an arrow per
    shuffle, a loop's feedback as an arc over its stage."""
    if not stages:
        return ""
    names = [str(st.get("stage")) for st in stages]
    depth: dict[str, int] = {}
    for st in stages:  # plan order: a stage's upstreams come before it
        ups = [u for u in st.get("upstreams", []) if u in depth]
        depth[str(st["stage"])] = 1 + max((depth[u] for u in ups), default=-1)
    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for name in names:
        column = depth[name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        where[name] = (
            _PAD + column * (_BOX_W + _GAP_X),
            _PAD + 34 + row * (_BOX_H + _GAP_Y),
        )
    width = _PAD * 2 + (max(depth.values()) + 1) * (_BOX_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + 34 + max(rows.values()) * (_BOX_H + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg class="graph" width="{width}" height="{height}" role="img" '
        'aria-label="job graph" xmlns="http://www.w3.org/2000/svg">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
        "</defs>",
    ]
    for st in stages:
        x, y = where[str(st["stage"])]
        for upstream in st.get("upstreams", []):
            if upstream in where:
                ux, uy = where[upstream]
                parts.append(
                    f'<line x1="{ux + _BOX_W}" y1="{uy + _BOX_H // 2}" x2="{x}" '
                    f'y2="{y + _BOX_H // 2}" stroke="#555" marker-end="url(#arrow)"/>'
                )
        kind = str(st.get("kind", ""))
        fill = {"source": "#e8f0fe", "loop": "#fef7e0", "join": "#f3e8fd"}.get(kind, "#e6f4ea")
        parts.append(
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="{fill}" '
            'stroke="#666"/>'
        )
        rate = st.get("records_per_s")
        detail = f"{st.get('tasks', 0)} tasks · lag {st.get('lag', 0) or 0}"
        lines = [
            (f"{st['stage']} ({kind})", "bold"),
            ("-" if rate is None else f"{_si(float(rate))} records/s", "normal"),
            (detail, "normal"),
        ]
        for i, (text, weight) in enumerate(lines):
            parts.append(
                f'<text x="{x + 8}" y="{y + 18 + i * 18}" font-size="12" '
                f'font-weight="{weight}">{html.escape(_clip(text, 28))}</text>'
            )
        if kind == "loop":
            cx = x + _BOX_W // 2
            parts.append(
                f'<path d="M{cx + 40},{y} C{cx + 40},{y - 26} {cx - 40},{y - 26} {cx - 40},{y}" '
                'fill="none" stroke="#b06000" stroke-dasharray="4 3" marker-end="url(#arrow)"/>'
                f'<text x="{cx - 26}" y="{y - 24}" font-size="11" fill="#b06000">feedback</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def checkpoint_chart(history: list[dict[str, Any]], width: int = 560, height: int = 140) -> str:
    """The recent completed checkpoints, oldest left: duration as bars (left scale) and
    records read as a line (right scale); failed ones as red marks."""
    points = [c for c in reversed(history) if c.get("status") in ("completed", "failed")][-50:]
    if not points:
        return ""
    top = max([float(c.get("duration_s") or 0) for c in points] + [0.001])
    most = max([int(c.get("records_in") or 0) for c in points] + [1])
    step = width / len(points)
    plot = height - 30
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        'aria-label="checkpoint history" xmlns="http://www.w3.org/2000/svg">'
    ]
    line = []
    for i, c in enumerate(points):
        x = i * step
        if c.get("status") == "failed":
            parts.append(
                f'<rect x="{x:.1f}" y="10" width="{max(1.0, step - 2):.1f}" height="{plot}" '
                'fill="#f9dedc"/>'
            )
            continue
        h = plot * float(c.get("duration_s") or 0) / top
        parts.append(
            f'<rect x="{x:.1f}" y="{10 + plot - h:.1f}" width="{max(1.0, step - 2):.1f}" '
            f'height="{h:.1f}" fill="#8ab4f8"/>'
        )
        y = 10 + plot - plot * int(c.get("records_in") or 0) / most
        line.append(f"{x + step / 2:.1f},{y:.1f}")
    if line:
        parts.append(
            f'<polyline points="{" ".join(line)}" fill="none" stroke="#137333" stroke-width="2"/>'
        )
    parts.append(
        f'<text x="0" y="{height - 4}" font-size="11" fill="#1a73e8">bars: duration, '
        f"max {top:.2f} s</text>"
        f'<text x="{width - 4}" y="{height - 4}" font-size="11" fill="#137333" '
        f'text-anchor="end">line: records, max {_si(most)}</text></svg>'
    )
    return "".join(parts)


def _si(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
