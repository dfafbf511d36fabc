"""processor.testing: `run` and `Driver`, the engine's stage code without a broker."""

from __future__ import annotations

import doctest
import json
import re
from collections import Counter
from typing import Any

import pytest

from processor import Pipeline, testing, testing_tasks
from processor.testing import Driver, run

LINES = ["the cat and the hat", "a cat, a bat!", "The end"]


def word_count() -> Pipeline:
    p = Pipeline()
    p.source("lines").flat_map(lambda s: re.findall(r"\w+", s.lower())).key_by(str).count().sink(
        "counts"
    )
    return p


def test_word_count_emits_each_word_once_at_the_end() -> None:
    got = run(word_count(), {"lines": LINES})
    words = Counter(w for line in LINES for w in re.findall(r"\w+", line.lower()))
    assert sorted(got["counts"]) == sorted(words.items())
    assert len(got["counts"]) == len(words)  # one checkpoint: one update per key


def test_bytes_go_through_the_sources_format_and_other_values_are_taken_as_decoded() -> None:
    p = Pipeline()
    p.source("e", value="json").key_by(lambda e: e["type"]).count().sink("per-type")
    inputs: dict[str, list[Any]] = {
        "e": [("u1", {"type": "add", "ts": 0}, 0), b'{"type": "add"}', {"type": "pay"}]
    }
    assert run(p, inputs) == {"per-type": [("add", 2), ("pay", 1)]}


def test_the_contract_example_counts_per_type() -> None:
    p = Pipeline()
    events = p.source("cart-events", value="json", timestamp=lambda e: e["ts"])
    events.key_by(lambda e: e["type"]).count().sink("events-per-type")
    got = run(p, {"cart-events": [("u1", {"type": "add", "ts": 0}, 0)]})
    assert got["events-per-type"] == [("add", 1)]


@pytest.mark.parametrize(
    ("every", "updates"),
    [(1, [1, 2, 3, 4, 5]), (2, [2, 4, 5]), (3, [3, 5]), (1000, [5])],
)
def test_an_aggregation_emits_once_per_key_and_checkpoint(every: int, updates: list[int]) -> None:
    p = Pipeline()
    p.source("in").key_by(str).count().sink("n")
    assert run(p, {"in": ["a"] * 5}, checkpoint_every=every)["n"] == [("a", n) for n in updates]


def clicks_per_window() -> Pipeline:
    p = Pipeline()
    (
        p.source("clicks", value="json", timestamp=lambda c: c["ts"], out_of_orderness_ms=100)
        .key_by(lambda c: c["page"])
        .window(size_ms=1000)
        .count()
        .sink("per-second")
    )
    return p


CLICKS = [
    {"page": "home", "ts": 10},
    {"page": "home", "ts": 990},
    {"page": "cart", "ts": 500},
    {"page": "home", "ts": 1500},
    {"page": "home", "ts": 1400},  # out of order, within the bound
    {"page": "cart", "ts": 2999},
]


def test_a_window_closes_when_the_watermark_passes_it_and_all_close_at_the_end() -> None:
    got = run(clicks_per_window(), {"clicks": CLICKS}, checkpoint_every=1)
    want = [("home@0", 2), ("cart@0", 1), ("home@1000", 2), ("cart@2000", 1)]
    assert sorted(got["per-second"]) == sorted(want)
    # Windows come out when the watermark passes them, the last ones at the end.
    assert got["per-second"][-1] == ("cart@2000", 1)


def test_driver_step_by_step_windows_and_late_records() -> None:
    d = Driver(clicks_per_window())
    d.send("clicks", {"page": "home", "ts": 10})
    d.send("clicks", {"page": "home", "ts": 900})
    d.checkpoint()
    assert d.output("per-second") == []  # the watermark is 800: [0, 1000) is open
    d.send("clicks", {"page": "home", "ts": 1100})
    d.checkpoint()
    assert d.output("per-second") == [("home@0", 2)]  # watermark 1000
    d.send("clicks", {"page": "home", "ts": 999})  # behind the watermark: late
    d.advance_watermark(2000)
    assert d.output("per-second") == [("home@0", 2), ("home@1000", 1)]
    assert d.late_records() == [("home", {"page": "home", "ts": 999})]
    assert d.dead_records() == []


def test_kafka_timestamps_default_to_the_records_index() -> None:
    p = Pipeline()
    p.source("t").key_by(str).window(size_ms=2).count().sink("pairs")
    got = run(p, {"t": ["a", "a", "a", ("k", "a", 10)]})["pairs"]
    assert got == [("a@0", 2), ("a@2", 1), ("a@10", 1)]


def test_a_join_pairs_records_of_two_sources_within_its_bound() -> None:
    p = Pipeline()
    views = p.source("views", value="json")  # Kafka timestamps
    clicks = p.source("clicks", value="json", timestamp=lambda c: c["ts"])
    (
        views.key_by(lambda v: v["id"])
        .join(clicks.key_by(lambda c: c["view"]), within_ms=100)
        .map(lambda pair: [pair[0]["id"], pair[1]["id"]])
        .sink("pairs")
    )
    got = run(
        p,
        {
            "views": [(None, {"id": "v1"}, 1000), (None, {"id": "v2"}, 2000)],
            "clicks": [
                {"id": "c1", "view": "v1", "ts": 1050},
                {"id": "c2", "view": "v1", "ts": 1200},  # too far from v1
                {"id": "c3", "view": "v2", "ts": 1950},
                {"id": "c4", "view": "v9", "ts": 2000},  # no such view
            ],
        },
        checkpoint_every=1,
    )
    assert sorted(got["pairs"]) == [("v1", ["v1", "c1"]), ("v2", ["v2", "c3"])]


def test_a_process_keeps_state_per_key() -> None:
    def first_seen(value: Any, state: Any) -> list[Any]:
        if state.get() is not None:
            return []
        state.set(value)
        return [value]

    p = Pipeline()
    p.source("in", value="json").key_by(lambda v: v["k"]).process(first_seen).sink("firsts")
    values = [{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "a", "n": 3}, {"k": "b", "n": 4}]
    # State survives checkpoints (it is written to the in-memory backend and read back).
    got = run(p, {"in": values}, checkpoint_every=1)
    assert got["firsts"] == [("a", {"k": "a", "n": 1}), ("b", {"k": "b", "n": 2})]


def test_several_partitions_give_the_same_output() -> None:
    lines = [f"w{i % 7} w{i % 3} w{i % 11}" for i in range(200)]
    p = Pipeline()
    words = p.source("lines").flat_map(str.split)
    words.key_by(str).count().sink("counts")
    words.key_by(str).filter(lambda w: w != "w1").map(lambda w: {"w": w}).sink("plain")
    one = run(p, {"lines": lines}, checkpoint_every=1000)
    many = run(p, {"lines": lines}, checkpoint_every=17, partitions=3, source_partitions=2)
    assert dict(many["counts"]) == dict(one["counts"])
    assert Counter(json.dumps(v) for v in many["plain"]) == Counter(
        json.dumps(v) for v in one["plain"]
    )
    assert len(many["counts"]) > len(one["counts"])  # several checkpoints: more updates


def test_dead_records_are_kept_and_the_rest_flows_on() -> None:
    p = Pipeline()
    orders = p.source("orders", value="json")
    orders.key_by(lambda o: o["user"]).map(lambda o: o["amount"]).sum().sink("revenue")
    d = Driver(p, checkpoint_every=2)
    for raw in [
        b'{"user": "ann", "amount": 5}',
        b"{not json",
        b'{"amount": 3}',  # no user: the key_by raises
        b'{"user": "ann", "amount": "7"}',  # sum takes numbers
        b'{"user": "ann", "amount": 2}',
    ]:
        d.send("orders", raw)
    # Decoded already, and no JSON can carry it through the shuffle (its real encoding).
    d.send("orders", {"user": "bob", "amount": {1, 2}})
    d.finish()
    assert d.output("revenue")[-1] == ("ann", 7)
    unencodable = "not JSON-encodable"
    dead = {
        (r.operator, unencodable if unencodable in r.error else r.error.partition(":")[0])
        for r in d.dead_records()
    }
    assert dead == {
        ("orders", "not JSON"),
        ("orders.key_by", "KeyError"),
        ("orders.key_by", "not JSON-encodable"),
        ("orders.key_by.map.sum", "not a number"),
    }
    assert len(d.dead_records()) == 4


def test_unknown_topics_and_bad_records_are_refused() -> None:
    with pytest.raises(ValueError, match="not a source topic"):
        Driver(word_count()).send("nope", "x")
    with pytest.raises(ValueError, match="not a sink topic"):
        Driver(word_count()).output("lines")
    with pytest.raises(ValueError, match="tuple of 4"):
        run(word_count(), {"lines": [(None, "a", 0, 1)]})
    with pytest.raises(ValueError, match="does not read"):
        run(word_count(), {"other": ["a"]})


def test_keys_and_headers_are_kept_with_each_record() -> None:
    d = Driver(word_count())
    d.send("lines", b"a b", key=b"k", timestamp=5, headers=[("source", b"web")])
    (record,) = d._tasks[d.plan.stages[0].name][0].pending
    assert (record.value, record.key, record.timestamp, record.headers) == (
        "a b",
        b"k",
        5,
        [("source", b"web")],
    )


def test_the_docstring_examples_hold() -> None:
    results = doctest.testmod(testing, raise_on_error=False)
    assert results.attempted >= 10 and results.failed == 0
    internal = doctest.testmod(testing_tasks, raise_on_error=False)  # MemoryState's
    assert internal.attempted >= 1 and internal.failed == 0


@pytest.mark.parametrize("partitions", [1, 3])
def test_merged_streams_of_two_sources_share_the_stages_below(partitions: int) -> None:
    p = Pipeline()
    web = p.source("web")
    app = p.source("app")
    web.merge(app).key_by(str).count().sink("per-page")
    got = run(
        p,
        {"web": ["home", "cart", "home"], "app": ["home", "pay"]},
        partitions=partitions,
        source_partitions=partitions,
    )
    assert sorted(got["per-page"]) == [("cart", 1), ("home", 3), ("pay", 1)]


def test_a_window_over_merged_sources_closes_by_both_watermarks() -> None:
    p = Pipeline()
    web = p.source("web", value="json", timestamp=lambda e: e["ts"])
    app = p.source("app", value="json", timestamp=lambda e: e["ts"])
    web.merge(app).key_by(lambda e: e["page"]).window(size_ms=1000).count().sink("per-second")
    d = Driver(p, partitions=2)
    d.send("web", {"page": "home", "ts": 100})
    d.send("app", {"page": "home", "ts": 200})
    d.send("web", {"page": "home", "ts": 1500})
    d.checkpoint()
    assert d.output("per-second") == []  # app's watermark (200) holds [0, 1000) open
    d.send("app", {"page": "home", "ts": 1200})
    d.checkpoint()
    assert d.output("per-second") == [("home@0", 2)]
    d.finish()
    assert d.output("per-second") == [("home@0", 2), ("home@1000", 2)]
