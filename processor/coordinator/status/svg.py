"""The pictures of the coordinator's status page, as inline SVG (no script, no library): the
job's graph, stage by stage, with each stage's records/s, lag and tasks, and a loop's
feedback; the last hour's checkpoints (duration, alignment, size); and per-task sparklines.

Pure functions of the status document (`processor.coordinator.status.document`), so a
unit test reads what an operator sees.
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
        busy = st.get("busy")
        detail = f"{st.get('tasks', 0)} tasks · lag {st.get('lag', 0) or 0}"
        throughput = "-" if rate is None else f"{_si(float(rate))} records/s"
        if busy is not None:
            throughput += f" · busy {float(busy):.0%}"
        lines = [
            (f"{st['stage']} ({kind})", "bold"),
            (throughput, "normal"),
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


def checkpoint_chart(hour: list[dict[str, Any]], width: int = 560, height: int = 150) -> str:
    """The last hour's checkpoints (`StatusHistory.checkpoints` buckets), oldest left: the
    longest duration per bucket as a bar (left scale) with its alignment part darker, the
    bytes uploaded as a line (right scale); a bucket where a checkpoint failed in red."""
    if not hour:
        return ""
    top = max([float(c.get("duration_s") or 0) for c in hour] + [0.001])
    most = max([int(c.get("size_bytes") or 0) for c in hour] + [1])
    span = float(hour[0].get("span_s") or float(hour[-1]["at"]) - float(hour[0]["at"]))
    step = width / max(int(hour[0].get("of") or len(hour)), 1)  # a bucket's width: time
    plot = height - 42
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        'aria-label="checkpoints over the last hour" xmlns="http://www.w3.org/2000/svg">'
    ]
    line = []
    bar_w = max(3.0, step - 1)
    for i, c in enumerate(hour):
        x = int(c.get("bucket", i)) * step
        if c.get("failed"):
            parts.append(
                f'<rect class="failed" x="{x:.1f}" y="10" width="{bar_w:.1f}" height="{plot}" '
                'fill="#f9dedc"/>'
            )
        if not c.get("completed"):
            continue
        h = plot * float(c.get("duration_s") or 0) / top
        a = min(h, plot * float(c.get("alignment_s") or 0) / top)
        parts.append(
            f'<rect class="duration" x="{x:.1f}" y="{10 + plot - h:.1f}" width="{bar_w:.1f}" '
            f'height="{h:.1f}" fill="#8ab4f8"/>'
        )
        if a > 0:
            parts.append(
                f'<rect class="alignment" x="{x:.1f}" y="{10 + plot - a:.1f}" '
                f'width="{bar_w:.1f}" height="{a:.1f}" fill="#1a73e8"/>'
            )
        y = 10 + plot - plot * int(c.get("size_bytes") or 0) / most
        line.append(f"{x + step / 2:.1f},{y:.1f}")
    if line:
        parts.append(
            f'<polyline points="{" ".join(line)}" fill="none" stroke="#137333" stroke-width="2"/>'
        )
    ago = f"-{span / 60:.0f} min" if span >= 60 else f"-{span:.0f} s"
    parts.append(
        f'<text x="0" y="{height - 20}" font-size="11" fill="#555">{ago}</text>'
        f'<text x="{width - 4}" y="{height - 20}" font-size="11" fill="#555" '
        'text-anchor="end">now</text>'
        f'<text x="0" y="{height - 4}" font-size="11" fill="#1a73e8">bars: duration, max '
        f"{top:.2f} s (dark: alignment)</text>"
        f'<text x="{width - 4}" y="{height - 4}" font-size="11" fill="#137333" '
        f'text-anchor="end">line: uploaded, max {_si(most)}B</text></svg>'
    )
    return "".join(parts)


def sparkline(values: list[float], color: str, width: int = 110, height: int = 22) -> str:
    """A small line of ``values`` (oldest left, zero at the bottom), titled with the last."""
    if not values:
        return ""
    top = max(max(values), 1e-9)
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - (height - 4) * v / top:.1f}" for i, v in enumerate(values)
    )
    return (
        f'<svg class="spark" width="{width}" height="{height}" role="img" '
        f'aria-label="last {_si(values[-1])}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>last {_si(values[-1])}, max {_si(top)}</title>"
        f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/></svg>'
    )


def _si(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
