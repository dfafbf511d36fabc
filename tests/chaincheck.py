"""examples/promotions.py checked exactly: its input, and what its sinks must hold computed
directly from that input (no engine code, no Kafka). Used by the chaos run (``python -m
tests.chaos --chained``).

The first stage counts clicks per page and second with lateness, the second sums those per
site and ten seconds and joins them with promotions. Every sink holds its records once each
only if no record was late anywhere: the clicks come in the order of their place in event
time, each at most ``OUT_OF_ORDER + LATENESS - MARGIN`` before it, so a click can be behind
its stage's watermark (which is at most the highest place read minus the bound) by less than
the lateness, never more; promotions come in order; and the first stage holds back the
watermark it forwards, so its results are never late downstream. (Partitions must not go
idle mid-stream: a partition that does may make the records after it late, by design.)
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from typing import TypedDict

from processor.serde.codec import sink_value
from tests.reference import SinkRecord

SITES = ["shop", "blog", "docs"]
PAGES = [f"{site}/{page}" for site in SITES for page in ("home", "item")]
# examples/promotions.py's constants (tests/unit/test_examples.py checks they agree).
SECOND, LATENESS, OUT_OF_ORDER, SITE_WINDOW, WITHIN = 1000, 2000, 1000, 10_000, 3000
MARGIN = 200  # how much less than bound + lateness a click is behind its place, at most
PROMOTION_EVERY = 2000  # ms of event time, on average
# build()'s sink parameters in examples/promotions.py, and the topics the chaos run gives them.
SINKS = {
    "per_second": "clicks-per-page-second",
    "per_site": "clicks-per-site-10s",
    "promotion_clicks": "promotion-clicks",
}


class Click(TypedDict):
    id: str
    page: str
    ts: int


class Promotion(TypedDict):
    id: str
    page: str
    ts: int


def stream(
    t0: int, clicks: int, seed: int, step_ms: int = 50
) -> tuple[list[Click], list[Promotion], list[Click | Promotion]]:
    """A click every ``step_ms`` of event time from ``t0`` on a random page, each up to
    ``OUT_OF_ORDER + LATENESS - MARGIN`` before its place: many behind the bound, none behind
    it by the lateness. A promotion on a random page every ``PROMOTION_EVERY`` ms on average,
    in order.

    Returns clicks, promotions and both in the order to send them (by place in event time):
    sent in that order, to any partitions, no record is late."""
    rng = random.Random(seed)
    behind = OUT_OF_ORDER + LATENESS - MARGIN
    out: list[Click] = []
    timed: list[tuple[int, int, Click | Promotion]] = []
    for i in range(clicks):
        place = t0 + i * step_ms
        click = Click(id=f"c{i}", page=rng.choice(PAGES), ts=place - rng.randrange(behind))
        out.append(click)
        timed.append((place, 1, click))
    span = clicks * step_ms
    promotions = [
        Promotion(id=f"p{j}", page=rng.choice(PAGES), ts=t0 + j * PROMOTION_EVERY + r)
        for j in range(span // PROMOTION_EVERY)
        for r in [rng.randrange(PROMOTION_EVERY)]
    ]
    timed += [(p["ts"], 0, p) for p in promotions]
    timed.sort(key=lambda e: (e[0], e[1]))  # stable: clicks and promotions each in order
    return out, promotions, [event for _, _, event in timed]


def seconds(clicks: Iterable[Click]) -> Counter[tuple[str, int]]:
    """Clicks per (page, second start)."""
    return Counter((c["page"], c["ts"] - c["ts"] % SECOND) for c in clicks)


def expected(clicks: list[Click], promotions: list[Promotion]) -> dict[str, Counter[SinkRecord]]:
    """What each sink must hold (by build()'s parameter), every window of the data closed."""
    per_second = seconds(clicks)
    per_site: Counter[tuple[str, int]] = Counter()
    for (page, start), n in per_second.items():
        per_site[page.split("/")[0], start - start % SITE_WINDOW] += n
    by_page: dict[str, list[tuple[int, int]]] = {}
    for (page, start), n in per_second.items():
        by_page.setdefault(page, []).append((start, n))
    pairs: Counter[SinkRecord] = Counter()
    for promo in promotions:
        for start, n in by_page.get(promo["page"], []):
            # A second's result has the event time of its last millisecond.
            if abs(start + SECOND - 1 - promo["ts"]) <= WITHIN:
                value = {"promo": promo["id"], "second": start, "clicks": n}
                pairs[promo["page"].encode(), sink_value(value)] += 1
    return {
        "per_second": Counter(
            (
                f"{page}@{start}".encode(),
                sink_value({"page": page, "second": start, "clicks": n}),
            )
            for (page, start), n in per_second.items()
        ),
        "per_site": Counter(
            (f"{s}@{start}".encode(), sink_value(n)) for (s, start), n in per_site.items()
        ),
        "promotion_clicks": pairs,
    }


def closes_everything(last: int, end: int) -> bool:
    """Whether records at ``end`` in every partition close every window and join state of
    data up to ``last``: the first stage's watermark is then ``end - OUT_OF_ORDER``, what it
    forwards at most ``SECOND + LATENESS`` lower, and the latest windows downstream end
    within ``SITE_WINDOW`` (the join's within ``WITHIN``) of the data."""
    forwarded = end - OUT_OF_ORDER - LATENESS - SECOND
    return forwarded - SITE_WINDOW - WITHIN > last + LATENESS + SECOND
