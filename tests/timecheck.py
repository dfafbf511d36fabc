"""examples/clicks.py checked exactly: its input, and what its sinks must hold computed
directly from that input (no engine code, no Kafka). Used by tests/integration/test_time.py
and by the chaos run (``python -m tests.chaos --clicks``).

A window sink must hold every window the watermark closed once, ``("<page>@<start>",
"<count>")``; the join sink every view and click of it at most ``WITHIN`` apart once,
``("<view id>", '{"view":...,"click":...}')``. Both hold only if no record was late: the
input's disorder is below the clicks' bound, views come in order, and no partition goes idle
mid-stream (a partition that does may make records after it late, by design).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TypedDict

from tests.reference import SinkRecord

PAGES = [f"page-{i}" for i in range(8)]
OUT_OF_ORDER = 2000  # the clicks source's bound (views have none)
MINUTE, SLIDE, GAP, WITHIN = 60_000, 20_000, 5000, 30_000
# build()'s sink parameters in examples/clicks.py, and their default topics.
SINKS = {
    "per_minute": "clicks-per-page-minute",
    "hopping": "clicks-per-page-hopping",
    "sessions": "click-sessions",
    "view_clicks": "view-clicks",
}


class View(TypedDict):
    id: str
    at: int  # the event time, sent as the Kafka timestamp (the pipeline ignores this field)


class Click(TypedDict):
    id: str
    page: str
    view_id: str
    ts: int


def stream(
    t0: int, clicks: int, seed: int, step_ms: int = 50, session_every: int = 1000
) -> tuple[list[View], list[Click], list[View | Click]]:
    """A click every ``step_ms`` of event time from ``t0``, each at most 1.5 s before its
    place (under the 2 s bound) and on a random page; event time jumps by 2 gaps every
    ``session_every`` clicks (every page's session ends). A view every second, in order; a
    click's view is up to 40 s before it or 10 s after, so most clicks pair and some do not.

    Returns views, clicks and both in the order to send them (by place in event time): sent
    in that order, to any partitions, no record is behind its partition's watermark."""
    rng = random.Random(seed)
    places, shift = [], 0
    for i in range(clicks):
        if i and i % session_every == 0:
            shift += 2 * GAP
        places.append(t0 + i * step_ms + shift)
    span = places[-1] - t0 if places else 0
    views = [View(id=f"v{j}", at=t0 + j * 1000) for j in range(span // 1000 + 1)]
    out: list[Click] = []
    for i, place in enumerate(places):
        j = min(len(views) - 1, max(0, (place - t0) // 1000 + rng.randint(-40, 10)))
        ts = place - rng.randrange(1500)
        out.append(Click(id=f"c{i}", page=rng.choice(PAGES), view_id=f"v{j}", ts=ts))
    timed: list[tuple[int, int, View | Click]] = [(v["at"], 0, v) for v in views]
    timed += [(place, 1, c) for place, c in zip(places, out, strict=True)]
    timed.sort(key=lambda e: (e[0], e[1]))  # stable: views and clicks each in their order
    order = [event for _, _, event in timed]
    return views, out, order


def windows(clicks: Iterable[Click], watermark: int) -> dict[str, Counter[SinkRecord]]:
    """What each window sink must hold (by build()'s parameter): its record once per window
    the watermark closed."""
    tumbling: Counter[tuple[str, int]] = Counter()
    hopping: Counter[tuple[str, int]] = Counter()
    times: dict[str, list[int]] = {}
    for c in clicks:
        page, ts = c["page"], c["ts"]
        tumbling[page, ts - ts % MINUTE] += 1
        last = ts - ts % SLIDE
        for start in range(last, ts - MINUTE, -SLIDE):
            hopping[page, start] += 1
        times.setdefault(page, []).append(ts)
    sessions: Counter[tuple[str, int]] = Counter()
    ends: dict[tuple[str, int], int] = {}
    for page, stamps in times.items():
        stamps.sort()
        start = prev = stamps[0]
        n = 0
        for ts in stamps:
            if ts - prev >= GAP:
                sessions[page, start], ends[page, start] = n, prev + GAP
                start, n = ts, 0
            prev, n = ts, n + 1
        sessions[page, start], ends[page, start] = n, prev + GAP

    def closed(
        counts: Counter[tuple[str, int]], end: Callable[[str, int], int]
    ) -> Counter[SinkRecord]:
        return Counter(
            (f"{p}@{s}".encode(), str(n).encode())
            for (p, s), n in counts.items()
            if end(p, s) <= watermark
        )

    return {
        "per_minute": closed(tumbling, lambda p, s: s + MINUTE),
        "hopping": closed(hopping, lambda p, s: s + MINUTE),
        "sessions": closed(sessions, lambda p, s: ends[p, s]),
    }


def pairs(views: Iterable[View], clicks: Iterable[Click]) -> Counter[SinkRecord]:
    """What the join sink must hold: each view and click of it at most ``WITHIN`` apart."""
    at = {v["id"]: v["at"] for v in views}
    return Counter(
        (c["view_id"].encode(), _compact({"view": c["view_id"], "click": c["id"]}).encode())
        for c in clicks
        if c["view_id"] in at and abs(at[c["view_id"]] - c["ts"]) <= WITHIN
    )


def closing(end: int) -> tuple[bytes, bytes]:
    """A click and a view at ``end``, for every partition after the data: the watermark
    passes every window of the data (the windows these open never close, they join
    nothing)."""
    click = Click(id="close", page="closing", view_id="none", ts=end)
    return json.dumps(click).encode(), json.dumps(View(id="close", at=end)).encode()


def records(
    partitions: Mapping[int, Iterable[tuple[bytes | None, bytes | None, object]]],
) -> Counter[SinkRecord]:
    """A sink's records read back per partition (key, value, headers) as a multiset."""
    return Counter((k or b"", v or b"") for part in partitions.values() for k, v, _ in part)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
