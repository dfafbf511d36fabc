"""The pipeline of the fallback test of operators after a window: per key, tumbling event-time
windows, and in the same stage after them

- a windowed ``process`` numbering each window's records as they come (1, 2, 3...), feeding a
  first-sight ``process`` (a window's record once, when its numbering first reaches the
  window's threshold) and a running ``reduce`` of the numbers (1, 3, 6...: a triangular
  number at every update);
- a windowed ``count``, feeding a ``process`` that keeps each window's count and reports it
  when an event-time timer set ``REPORT_AFTER_MS`` after the window fires.

Input records: ``{"k": "k0" ... "k9", "ts": <ms>}``, in event-time order per partition. A
replay that forgets the operators after a window fires a window twice and sets the reduce
back (the windowed ``process``), or never reports a count (the ``count``: the timer was never
set).

The source never counts as idle (``NEVER_IDLE_MS``): the test's feed pauses while it waits
for a checkpoint (a restart, a checkpoint timing out), a partition idle by then lets the other
one's watermark pass its records still to be read, and they come late to the windows
(docs/pipelines.md, late records). Which ones depends on timing; the test is exact.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline

# The numbering windows span a few epochs of the test's feed (a replay ends inside one), the
# counting windows less (a replay closes some); a report comes epochs after its window.
SIZE_MS, COUNT_SIZE_MS, REPORT_AFTER_MS = 7000, 2000, 30_000
NEVER_IDLE_MS = 3_600_000  # longer than any pause of the test's feed


def threshold(window: str) -> int:
    """Where the numbering window ``"<key>@<start>"`` fires: spread over its records."""
    key, start = window.split("@")
    return 3 + (int(key[1:]) * 7 + int(start) // SIZE_MS) % 130


def _number(event: Any, state: Any) -> list[Any]:
    n = state.get(0) + 1
    state.set(n)
    return [n]


def _first_sight(n: int, state: Any) -> list[Any]:
    if state.get() is None and n >= threshold(state.key):
        state.set(n)
        return [n]
    return []


def _remember(count: int, state: Any) -> list[Any]:
    state.set(count)
    state.timers.set(state.timestamp + REPORT_AFTER_MS)
    return []


def _report(at_ms: int, state: Any) -> list[Any]:
    count = state.get()
    state.delete()
    return [] if count is None else [count]


def build(
    events: str = "events",
    firsts: str = "firsts",
    sums: str = "sums",
    counts: str = "counts",
    reports: str = "reports",
) -> Pipeline:
    p = Pipeline()
    source = p.source(events, value="json", timestamp=lambda e: e["ts"], idle_ms=NEVER_IDLE_MS)
    keyed = source.key_by(lambda e: e["k"])
    numbered = keyed.window(size_ms=SIZE_MS, name="numbering").process(_number, name="number")
    numbered.process(_first_sight, name="first-sight").sink(firsts)
    numbered.reduce(lambda total, n: total + n, name="running").sink(sums)
    counted = keyed.window(size_ms=COUNT_SIZE_MS, name="counting").count(name="count")
    counted.sink(counts)
    counted.process(_remember, on_timer=_report, name="remember").sink(reports)
    return p
