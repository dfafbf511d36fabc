"""The cart pipeline of issue 23 with event-time timers, for tests/integration/test_timers.py:
per user, a checkout's item count, or an abandoned cart 30 s of event time after its last
add."""

from __future__ import annotations

from typing import Any

from processor import Pipeline

CART_MS = 30_000


def track(event: dict[str, Any], state: Any) -> list[Any]:
    """The contract's cart example (issue 23)."""
    cart = state.get({"items": 0})
    if event["type"] == "add":
        cart["items"] += 1
        state.set(cart)
        state.timers.set(state.timestamp + CART_MS)
        return []
    if event["type"] != "checkout":
        return []
    state.delete()
    state.timers.clear()
    return [{"user": state.key, "checked_out": cart["items"]}]


def expired(at_ms: int, state: Any) -> list[Any]:
    cart = state.get()
    if cart is None or state.timers.pending():  # a later timer supersedes this one
        return []
    state.delete()
    return [{"user": state.key, "abandoned": cart["items"], "at": at_ms}]


def build(events: str, outcomes: str) -> Pipeline:
    p = Pipeline()
    carts = p.source(events, value="json", timestamp=lambda e: e["ts"], out_of_orderness_ms=1000)
    carts.key_by(lambda e: e["user"]).process(track, on_timer=expired).sink(outcomes)
    return p
