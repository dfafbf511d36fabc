"""Two timed stages in a chain, for tests/integration/test_time.py: a window with lateness
counts per key, and a window downstream sums those counts over every key.

Input on ``events``: ``{"k": "a", "ts": <ms>}``. Output on ``windows``: ``"all@<start>"``, the
number of events in ``[start, start + 1000)``.
"""

from __future__ import annotations

from processor import Pipeline

LATENESS_MS = 500
OUT_OF_ORDER_MS = 200


def build(events: str = "events", windows: str = "windows") -> Pipeline:
    p = Pipeline()
    (
        p.source(
            events, value="json", timestamp=lambda e: e["ts"], out_of_orderness_ms=OUT_OF_ORDER_MS
        )
        .key_by(lambda e: e["k"], name="by-key")
        .window(size_ms=1000, lateness_ms=LATENESS_MS, name="late")
        .count(name="per-key")
        .key_by(lambda n: "all", name="all")
        .window(size_ms=1000, name="second")
        .sum(name="total")
        .sink(windows)
    )
    return p
