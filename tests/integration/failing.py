"""The pipelines of the user-visible error tests (tests/integration/test_errors.py): user
functions that raise on one record among good ones."""

from __future__ import annotations

from typing import Any

from processor import Pipeline


class BadEvent(Exception):
    pass


def _track(event: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    if event.get("bad"):
        raise BadEvent(f"cannot track event {event['id']}")
    total = state.get(0) + event["n"]
    state.set(total)
    return [{"user": event["user"], "total": total}]


def build(events: str = "events", totals: str = "totals") -> Pipeline:
    """A ``process`` (a keyed stage: no combiner runs it upstream) that raises on a bad event."""
    p = Pipeline()
    (
        p.source(events, value="json")
        .key_by(lambda e: e["user"], name="by-user")
        .process(_track, name="track")
        .sink(totals, name="totals")
    )
    return p


def _parse(line: str) -> dict[str, Any]:
    user, n = line.split(",")
    return {"user": user, "n": int(n)}  # "oops" is not a number: ValueError


def counts(lines: str = "lines", out: str = "out", parsed: str = "parsed") -> Pipeline:
    """Text lines parsed in the source stage (and written as they are parsed, from that
    stage), summed per user in a keyed stage."""
    p = Pipeline()
    events = p.source(lines, value="text").map(_parse, name="parse")
    events.sink(parsed, name="parsed")
    (
        events.key_by(lambda e: e["user"], name="by-user")
        .map(lambda e: e["n"], name="amount")
        .sum(name="total")
        .sink(out, name="totals")
    )
    return p
