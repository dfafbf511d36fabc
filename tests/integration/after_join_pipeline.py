"""The pipeline of the fallback test of operators after a join: two streams joined per key
within ``WITHIN_MS`` of event time, and in the same stage after the join

- the pairs themselves (``"<left id>+<right id>"``);
- a first-sight ``process`` counting a key's pairs, that emits once, when the count reaches
  the key's threshold;
- a ``count`` of the pairs per key, and a running ``reduce`` of its updates.

Input records on both sides: ``{"k": "k0" ... "k29", "id": "l17", "ts": <ms>}``, in event-time
order per partition. A replay that forgets the operators after the join fires a key twice,
sets the reduce back and loses pairs from the count.

The sources never count as idle (``NEVER_IDLE_MS``): the test's feed pauses while it waits
for a checkpoint (a restart, a checkpoint timing out), a source idle by then lets the other
sources' watermark pass its records still to be read, and they come late to the join
(docs/pipelines.md, late records). Which ones depends on timing; the test is exact.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline, Stream

WITHIN_MS = 150
NEVER_IDLE_MS = 3_600_000  # longer than any pause of the test's feed


def threshold(key: str) -> int:
    """Where ``key`` fires: spread over the run, so that keys fire in every epoch."""
    return 20 + (int(key[1:]) * 37) % 700


def _first_sight(pair: Any, state: Any) -> list[Any]:
    n = state.get(0) + 1
    state.set(n)
    return [n] if n == threshold(state.key) else []


def _source(p: Pipeline, topic: str) -> Stream[Any]:
    return p.source(topic, value="json", timestamp=lambda e: e["ts"], idle_ms=NEVER_IDLE_MS)


def build(
    lefts: str = "lefts",
    rights: str = "rights",
    pairs: str = "pairs",
    firsts: str = "firsts",
    counts: str = "counts",
    sums: str = "sums",
) -> Pipeline:
    p = Pipeline()
    left = _source(p, lefts).key_by(lambda e: e["k"])
    right = _source(p, rights).key_by(lambda e: e["k"])
    joined = left.join(right, within_ms=WITHIN_MS, name="pairing")
    joined.map(lambda pair: f"{pair[0]['id']}+{pair[1]['id']}").sink(pairs)
    joined.process(_first_sight, name="first-sight").sink(firsts)
    count = joined.count(name="count")
    count.sink(counts)
    count.reduce(lambda total, update: total + update, name="running").sink(sums)
    return p
