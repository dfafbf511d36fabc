"""The chained chaos run's input (tests/chaincheck.py) keeps the promise its exact check rests
on: sent in its order to any partitions, no click is behind its stage's watermark by the
lateness, though many are behind it, and promotions come in order; and its constants are
examples/promotions.py's."""

from __future__ import annotations

import json
from pathlib import Path

from processor.api.node import JoinNode, WindowNode
from processor.plan.load import load_pipeline
from tests import chaincheck
from tests.chaincheck import LATENESS, OUT_OF_ORDER, SECOND, expected, stream

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "promotions.py"
T0 = 1_700_000_000_000


def test_the_constants_are_the_examples() -> None:
    pipeline, plan = load_pipeline(str(EXAMPLE))
    sources = {n.name: n for n in pipeline.sources}
    assert sources["clicks"].out_of_orderness_ms == OUT_OF_ORDER
    assert sources["promotions"].out_of_orderness_ms == 0
    windows = {n.name: n for n in pipeline.nodes if isinstance(n, WindowNode)}
    first = windows["page-second"]
    assert (first.size_ms, first.lateness_ms) == (SECOND, LATENESS)
    assert (windows["site-10s"].size_ms, windows["site-10s"].lateness_ms) == (
        chaincheck.SITE_WINDOW,
        0,
    )
    join = next(n for n in pipeline.nodes if isinstance(n, JoinNode))
    assert join.within_ms == chaincheck.WITHIN
    assert {n.topic for n in pipeline.sinks} == set(chaincheck.SINKS.values())
    # Two timed stages in a chain: the window with lateness feeds a window and a join.
    assert [s.head.name for s in plan.stages if not s.is_source] == [
        "by-page",
        "by-site",
        join.name,
    ]


def test_no_click_is_late_whatever_the_partitions_though_many_are_behind() -> None:
    clicks, promotions, order = stream(T0, 5000, seed=3)
    assert len(order) == len(clicks) + len(promotions)
    for partitions in (1, 2, 3, 5):
        highest: dict[tuple[str, int], int] = {}
        sent = dict.fromkeys(("c", "p"), 0)
        behind = 0
        for event in order:
            kind = event["id"][0]
            where = (kind, sent[kind] % partitions)
            sent[kind] += 1
            ts, top = event["ts"], highest.get(where, event["ts"])
            if kind == "p":
                assert ts >= top, (partitions, event)  # in order: the source has no bound
            else:
                # The stage's watermark is at most top - OUT_OF_ORDER; a window takes the
                # click while its end (above ts) plus the lateness is above the watermark.
                assert ts + 1 + LATENESS > top - OUT_OF_ORDER, (partitions, event)
                behind += ts < top - OUT_OF_ORDER
            highest[where] = max(ts, top)
        assert behind > len(clicks) // 10, partitions  # the lateness matters


def test_every_click_counts_once_per_stage_and_promotions_pair() -> None:
    clicks, promotions, _ = stream(T0, 5000, seed=3)
    want = expected(clicks, promotions)
    seconds = [json.loads(v) for _, v in want["per_second"].elements()]
    assert sum(s["clicks"] for s in seconds) == len(clicks)
    assert sum(int(v) for _, v in want["per_site"].elements()) == len(clicks)
    pairs = sum(want["promotion_clicks"].values())
    # Each promotion meets the seconds of its page within 3 s on either side: up to 7.
    assert 3 * len(promotions) < pairs <= 7 * len(promotions)
