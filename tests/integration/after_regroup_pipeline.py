"""The pipeline of the fallback test of ``regroup``: per word its count; the counts regrouped
by bucket (``count // BUCKET``), each bucket's number of words, as words move up from bucket
to bucket; and in the regroup's stage after it a first-sight ``process`` (a bucket's record
once, when its number of words first reaches the bucket's threshold) and a running ``reduce``
of its updates.

Input records: words ``w0`` ... ``w199``. A replay that forgets the words' last counts (the
regroup's memory, in the count's stage) takes back nothing when a word moves on: buckets
overcount. One that forgets the operators after the regroup fires a bucket twice, and sets
the reduce back.
"""

from __future__ import annotations

from typing import Any

from processor import Aggregator, Pipeline

BUCKET = 10


def bucket(count: int) -> int:
    return count // BUCKET


def threshold(bucket: int) -> int:
    """Where ``bucket`` fires: spread over the run, so that buckets fire in many epochs."""
    return 10 + (bucket * 37) % 50


def _first_sight(words: int, state: Any) -> list[Any]:
    if state.get() is None and words >= threshold(state.key):
        state.set(words)
        return [threshold(state.key)]
    return []


def build(
    words: str = "words", buckets: str = "buckets", firsts: str = "firsts", sums: str = "sums"
) -> Pipeline:
    p = Pipeline()
    counts = p.source(words).key_by(str, name="count-words").count(name="count")
    per_bucket = counts.regroup(lambda word, n: bucket(n), Aggregator.count(), name="per-bucket")
    per_bucket.sink(buckets)
    per_bucket.process(_first_sight, name="first-sight").sink(firsts)
    per_bucket.reduce(lambda total, update: total + update, name="running").sink(sums)
    return p
