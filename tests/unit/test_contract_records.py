"""Issue 23's contract, as written there: keys, timers, emit="record", a sink key function and
`processor.testing.run`, with nothing but the public names."""

from __future__ import annotations

from typing import Any

from processor import Pipeline
from processor.testing import run


def _pipeline() -> Pipeline:
    p = Pipeline()
    events = p.source(
        "cart-events",
        key="text",
        value="json",
        timestamp=lambda e: e["ts"],
        out_of_orderness_ms=1000,
    )

    def track(event: Any, state: Any) -> list[Any]:
        cart = state.get({"items": 0})
        if event["type"] == "add":
            cart["items"] += 1
            state.set(cart)
            state.timers.set(state.timestamp + 30_000)
            return []
        if event["type"] != "checkout":
            return []
        state.delete()
        state.timers.clear()
        return [{"user": state.key, "checked_out": cart["items"]}]

    def expired(at_ms: int, state: Any) -> list[Any]:
        cart = state.get()
        if cart is None or state.timers.pending():
            return []
        state.delete()
        return [{"user": state.key, "abandoned": cart["items"], "at": at_ms}]

    (
        events.key_by(lambda e, meta: meta.key, meta=True)
        .process(track, on_timer=expired)
        .sink("cart-outcomes", key=lambda k, v: v["user"], value="json")
    )
    events.key_by(lambda e: e["type"]).count(emit="record").sink("events-per-type")
    return p


def test_the_contract_line() -> None:
    out = run(_pipeline(), {"cart-events": [("u1", {"type": "add", "ts": 0}, 0)]})
    assert out["events-per-type"] == [("add", 1)]
    assert out["cart-outcomes"] == [("u1", {"user": "u1", "abandoned": 1, "at": 30_000})]


def test_checkouts_abandonments_and_a_later_add_that_supersedes_a_timer() -> None:
    events = [
        ("u1", b'{"type": "add", "ts": 0}', 0),
        ("u2", b'{"type": "add", "ts": 1000}', 1000),
        ("u1", b'{"type": "add", "ts": 20000}', 20000),  # u1's timer moves to 50,000
        ("u2", b'{"type": "checkout", "ts": 5000}', 5000),
        ("u3", b'{"type": "view", "ts": 40000}', 40000),
    ]
    out = run(_pipeline(), {"cart-events": events})
    assert sorted(out["cart-outcomes"], key=repr) == [
        ("u1", {"user": "u1", "abandoned": 2, "at": 50_000}),
        ("u2", {"user": "u2", "checked_out": 1}),
    ]
    assert out["events-per-type"] == [
        ("add", 1),
        ("add", 2),
        ("add", 3),
        ("checkout", 1),
        ("view", 1),
    ]
