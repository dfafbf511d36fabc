"""examples/nexmark/q0.py ... q8.py through `processor.testing` (the engine's stage code, no
broker): each query's output equals its definition (issue #42) computed directly over the same
events (`tests.nexmark_data`), whatever the partitions and the checkpoints. Window queries are
compared row for row (each window's result once); the updating ones (q4, q6) by the last value
per key."""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from processor import Pipeline
from processor.testing import Driver
from tests import nexmark_data as nexmark

QUERIES = Path(__file__).resolve().parents[2] / "examples" / "nexmark"
EVENTS = 1500
# (tasks per keyed stage, source partitions, records between checkpoints)
LAYOUTS = [(1, 1, 1000), (3, 2, 37)]


def _build(query: str, **kwargs: Any) -> Pipeline:
    build: Callable[..., Pipeline] = runpy.run_path(str(QUERIES / f"{query}.py"))["build"]
    return build(**kwargs)


def _run(query: str, stream: list[nexmark.Event], layout: tuple[int, int, int]) -> Driver:
    """``stream`` through ``query``'s pipeline, as JSON lines like the crate's, to the end."""
    partitions, source_partitions, every = layout
    pipeline = _build(query, out_of_orderness_ms=nexmark.DISORDER_MS)
    driver = Driver(pipeline, partitions, source_partitions, every)
    for event in stream:
        driver.send("nexmark", json.dumps(event).encode())
    driver.finish()
    assert driver.dead_records() == [] and driver.late_records() == []
    return driver


def _last_per_key(output: list[tuple[Any, Any]]) -> dict[str, Any]:
    return {key: value for key, value in output}


@pytest.fixture(scope="module", params=[42, 7])
def stream(request: pytest.FixtureRequest) -> list[nexmark.Event]:
    seed: int = request.param
    return nexmark.events(EVENTS, seed=seed)


def test_the_events_are_like_the_crates(stream: list[nexmark.Event]) -> None:
    """Every kind, the crate's fields, relationships that make each query's output
    non-trivial, and disorder within the bound."""
    persons, auctions = nexmark.of("Person", stream), nexmark.of("Auction", stream)
    assert set(persons[0]) == {
        *("id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra")
    }
    assert set(auctions[0]) == {
        *("id", "item_name", "description", "initial_bid", "reserve", "date_time"),
        *("expires", "seller", "category", "extra"),
    }
    assert set(nexmark.of("Bid", stream)[0]) == {
        *("auction", "bidder", "price", "channel", "url", "date_time", "extra")
    }
    assert len(persons) > 30 and len(auctions) > 100
    times = [next(iter(e.values()))["date_time"] for e in stream]
    assert times != sorted(times)
    assert all(t > max(times[:i], default=0) - nexmark.DISORDER_MS for i, t in enumerate(times))
    for query in ("q2", "q3", "q5", "q7", "q8"):  # q2: auction 1107 is the only multiple
        assert len(getattr(nexmark, query)(stream)) >= 2, query
    assert len(nexmark.q4(stream)) == 5 and len(nexmark.q6(stream)) > 10
    assert _sent_before_their_match(stream) >= (3, 3)


def _sent_before_their_match(stream: list[nexmark.Event]) -> tuple[int, int]:
    """Bids within their auction's time sent before it, and auctions sent before their
    seller: what the joins of q3, q4 and q6 must buffer."""
    position = {("a", e["Auction"]["id"]): i for i, e in enumerate(stream) if "Auction" in e}
    position |= {("p", e["Person"]["id"]): i for i, e in enumerate(stream) if "Person" in e}
    auctions = {a["id"]: a for a in nexmark.of("Auction", stream)}
    early_bids = early_auctions = 0
    for i, event in enumerate(stream):
        if "Bid" in event and (auction := auctions.get(event["Bid"]["auction"])):
            valid = auction["date_time"] <= event["Bid"]["date_time"] <= auction["expires"]
            early_bids += valid and i < position["a", auction["id"]]
        if "Auction" in event:
            early_auctions += i < position["p", event["Auction"]["seller"]]
    return early_bids, early_auctions


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q5", "q7", "q8"])
def test_each_row_once(query: str, layout: tuple[int, int, int], stream: Any) -> None:
    """Pass-through, selection, the join and the windows: every row of the definition once,
    and nothing else."""
    got = _run(query, stream, layout).output(f"nexmark-{query}")
    want = getattr(nexmark, query)(stream)
    assert nexmark.canonical([value for _, value in got]) == nexmark.canonical(want)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("query", ["q4", "q6"])
def test_updating_queries_end_at_the_definition(
    query: str, layout: tuple[int, int, int], stream: Any
) -> None:
    """The average per category (q4) and per seller over its last 10 closed auctions (q6):
    the last update of each key is the definition's value."""
    got = _last_per_key(_run(query, stream, layout).output(f"nexmark-{query}"))
    assert got == getattr(nexmark, query)(stream)


def test_every_query_has_the_contracts_build() -> None:
    """``build(events=..., output=...)`` reads the one topic and writes the one sink."""
    for n in range(9):
        pipeline = _build(f"q{n}", events="in", output="out")
        assert [s.topic for s in pipeline.sources] == ["in"]
        assert [s.topic for s in pipeline.sinks] == ["out"]
        default = runpy.run_path(str(QUERIES / f"q{n}.py"))["pipeline"]
        assert [s.topic for s in default.sinks] == [f"nexmark-q{n}"]


# Lines as ``nexmark --no-wait`` prints them: serde's externally tagged enum, the struct's
# fields in their order (the Person is the crate's own test event; extras shortened).
CRATE_LINES = [
    b'{"Person":{"id":1000,"name":"vicky noris","email_address":"yplkvgz@qbxfg.com",'
    b'"credit_card":"7878 5821 1864 2539","city":"cheyenne","state":"az",'
    b'"date_time":1700000000000,"extra":"lwaiyhjhrk"}}',
    b'{"Auction":{"id":1000,"item_name":"wkfrqmedhoczahvrgjzf","description":"qt",'
    b'"initial_bid":1416,"reserve":2282,"date_time":1700000000000,"expires":1700000000180,'
    b'"seller":1000,"category":10,"extra":"x"}}',
    b'{"Bid":{"auction":1000,"bidder":1001,"price":2070,"channel":"Google",'
    b'"url":"https://www.nexmark.com/googl/item.htm?query=1","date_time":1700000000000,'
    b'"extra":"y"}}',
]


def test_the_crates_lines_go_through() -> None:
    """The crate's JSON lines as they come (bytes, decoded by the source): q0 passes the bid
    through whole, q4 prices its auction."""
    outputs = {}
    for query in ("q0", "q4"):
        driver = Driver(_build(query))
        for line in CRATE_LINES:
            driver.send("nexmark", line)
        driver.finish()
        outputs[query] = driver.output(f"nexmark-{query}")
    assert outputs["q0"] == [(None, json.loads(CRATE_LINES[2])["Bid"])]
    assert outputs["q4"] == [("10", {"category": 10, "avg_price": 2070.0})]


@pytest.mark.xfail(
    strict=True,
    reason="no join without a time bound (#42): q4 and q6 drop an auction at expires + 1 by "
    "the watermark, so a bid behind the watermark (a partition back from idle) is lost, "
    "while the definition's join still counts it",
)
@pytest.mark.parametrize("query", ["q4", "q6"])
def test_a_bid_behind_the_watermark_still_counts(query: str) -> None:
    driver = Driver(_build(query, out_of_orderness_ms=0))
    auction = json.loads(CRATE_LINES[1])
    bid = json.loads(CRATE_LINES[2])
    driver.send("nexmark", auction)
    driver.advance_watermark(auction["Auction"]["expires"] + 10)
    driver.send("nexmark", bid)  # within the auction's time, behind the watermark
    driver.finish()
    assert [v["avg_price"] for _, v in driver.output(f"nexmark-{query}")] == [2070.0]
