"""The chaos run's event-time input (tests/timecheck.py) keeps the promise its exact check
rests on: sent in its order to any partitions, no record is behind its partition's
watermark, so none can be late."""

from __future__ import annotations

import itertools

from tests.timecheck import GAP, MINUTE, OUT_OF_ORDER, pairs, stream, windows

T0 = 1_700_000_000_000


def test_no_record_is_behind_its_partitions_watermark_whatever_the_partitions() -> None:
    views, clicks, order = stream(T0, 5000, seed=3)
    assert len(order) == len(views) + len(clicks)
    for partitions in (1, 2, 3, 5):
        highest: dict[tuple[str, int], int] = {}
        sent = dict.fromkeys(("click", "view"), 0)
        for event in order:
            kind = "view" if "at" in event else "click"
            ts = event["at"] if "at" in event else event["ts"]  # type: ignore[typeddict-item]
            bound = 0 if kind == "view" else OUT_OF_ORDER  # the views' source has none
            where = (kind, sent[kind] % partitions)
            sent[kind] += 1
            assert ts >= highest.get(where, ts) - bound, (partitions, event)
            highest[where] = max(ts, highest.get(where, ts))


def test_sessions_end_and_some_clicks_pair_and_some_do_not() -> None:
    views, clicks, _ = stream(T0, 5000, seed=3)
    expected = windows(clicks, watermark=T0 + 100 * MINUTE)
    assert sum(int(n) for _, n in expected["per_minute"]) == len(clicks)
    assert sum(int(n) for _, n in expected["sessions"]) == len(clicks)
    assert sum(int(n) for _, n in expected["hopping"]) == 3 * len(clicks)
    assert len(expected["sessions"]) >= 8 * (5000 // 1000)  # every page's session ends
    paired = sum(pairs(views, clicks).values())
    assert len(clicks) // 2 < paired < len(clicks)  # a click's view: up to 40 s before it
    # Sessions split only at gaps of GAP or more between a page's clicks.
    by_page = sorted((c["page"], c["ts"]) for c in clicks)
    splits = sum(1 for (p, a), (q, b) in itertools.pairwise(by_page) if p == q and b - a >= GAP)
    assert len(expected["sessions"]) == splits + len({c["page"] for c in clicks})
