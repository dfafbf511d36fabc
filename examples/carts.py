"""Shopping carts: checkouts, abandoned carts and a running count of events per type.

Input records on ``cart-events``: Kafka key the user id (text), value
``{"type": "add" | "checkout" | ..., "ts": <ms>}``, and a ``source`` header naming the app
that sent it (``web``, ``ios``...).

- ``cart-outcomes``: key the user id (a sink key function), value
  ``{"user": ..., "checked_out": <items>, "source": ...}`` for each checkout, or
  ``{"user": ..., "abandoned": <items>, "at": <ms>, "source": ...}`` when a cart had no
  checkout for 30 s of event time after its last add (an event-time timer per user); a header
  ``outcome`` says which.
- ``events-per-type``: per event type, a running count, one update per input record
  (``emit="record"``): 1, 2, 3... per type.

The timer is set again on every add; the earlier ones still fire, and find a later timer
pending, so only the last one abandons the cart.
"""

from typing import Any

from processor import Pipeline

ABANDON_AFTER_MS = 30_000


def track(event: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """An add grows the user's cart and (re)arms its timer; a checkout empties it."""
    cart = state.get({"items": 0, "source": ""})
    if event["type"] == "add":
        cart["items"] += 1
        cart["source"] = dict(state.headers).get("source", b"").decode()
        state.set(cart)
        state.timers.set(state.timestamp + ABANDON_AFTER_MS)
        return []
    if event["type"] != "checkout":
        return []
    state.delete()
    state.timers.clear()
    return [{"user": state.key, "checked_out": cart["items"], "source": cart["source"]}]


def expired(at_ms: int, state: Any) -> list[dict[str, Any]]:
    """The user's cart had no checkout in time, unless a later add re-armed the timer."""
    cart = state.get()
    if cart is None or state.timers.pending():
        return []
    state.delete()
    return [{"user": state.key, "abandoned": cart["items"], "at": at_ms, "source": cart["source"]}]


def outcome(_key: Any, value: dict[str, Any]) -> list[tuple[str, bytes]]:
    return [("outcome", b"abandoned" if "abandoned" in value else b"checkout")]


def build(
    cart_events: str = "cart-events",
    cart_outcomes: str = "cart-outcomes",
    events_per_type: str = "events-per-type",
    idle_ms: int = 10_000,
) -> Pipeline:
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    pipeline = Pipeline()
    events = pipeline.source(
        cart_events,
        key="text",
        value="json",
        timestamp=lambda e: e["ts"],
        out_of_orderness_ms=1000,
        idle_ms=idle_ms,
    )
    (
        events.key_by(lambda e, meta: meta.key, meta=True)
        .process(track, on_timer=expired)
        .sink(cart_outcomes, key=lambda _k, v: v["user"], value="json", headers=outcome)
    )
    events.key_by(lambda e: e["type"]).count(emit="record").sink(events_per_type)
    return pipeline


pipeline = build()
