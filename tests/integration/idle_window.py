"""A source that goes idle after 1 s without records, counts per key in one-second windows,
for tests/integration/test_time.py.

Input on ``events``: ``{"k": "a", "ts": <ms>}``. Output on ``windows``: ``"<k>@<start>"``.
"""

from __future__ import annotations

from processor import Pipeline

IDLE_MS = 1000


def build(events: str = "events", windows: str = "windows") -> Pipeline:
    p = Pipeline()
    (
        p.source(events, value="json", timestamp=lambda e: e["ts"], idle_ms=IDLE_MS)
        .key_by(lambda e: e["k"], name="by-key")
        .window(size_ms=1000, name="second")
        .count(name="per-second")
        .sink(windows)
    )
    return p
