"""The pipeline of the state TTL recovery test: per key, in event time with a TTL, a running
count (``emit="record"``: an update per record, 1 again after the key expired) and a first
sight (the records that find no state: the key's first, and its first after it expired).

Input records: ``{"k": "pool3", "ts": 1000010}``, ``ts`` the event time.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline

TTL_MS = 100_000


def _key(event: Any) -> Any:
    return event["k"]


def _first_sight(event: Any, state: Any) -> list[Any]:
    new = state.get() is None
    state.set(event["ts"])
    return [event["ts"]] if new else []


def build(events: str = "events", counts: str = "counts", firsts: str = "firsts") -> Pipeline:
    p = Pipeline()
    source = p.source(events, value="json", timestamp=lambda e: e["ts"])
    source.key_by(_key).count(emit="record", ttl_ms=TTL_MS).sink(counts)
    source.key_by(_key, name="first").process(_first_sight, ttl_ms=TTL_MS).sink(firsts)
    return p
