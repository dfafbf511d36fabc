"""The pipeline of the ``emit="record"`` recovery test: per key, a running count and the last
value, each with an update per input record.

Input records: ``{"k": "k7", "seq": 3}``, ``seq`` counting 1, 2, 3, ... per key.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline


def _key(event: Any) -> Any:
    return event["k"]


def build(events: str = "events", counts: str = "counts", lasts: str = "lasts") -> Pipeline:
    p = Pipeline()
    source = p.source(events, value="json")
    source.key_by(_key).count(emit="record").sink(counts)
    # The key_by's only child: pre-aggregated if it emitted per checkpoint.
    source.key_by(_key, name="last").reduce(lambda _old, new: new, emit="record").sink(lasts)
    return p
