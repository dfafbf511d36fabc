"""Average reading per sensor: an aggregate with a merge, so each epoch's readings are
pre-aggregated before the shuffle, then mapped to the average.

Input records on ``readings``: ``{"sensor": "s1", "value": 21.5}``.
"""

from processor import Pipeline


def add(acc, reading):
    total, n = acc
    return [total + reading["value"], n + 1]


def merge(a, b):
    return [a[0] + b[0], a[1] + b[1]]


def build(readings="readings", averages="sensor-averages"):
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    pipeline = Pipeline()
    (
        pipeline.source(readings, value="json")
        .key_by(lambda reading: reading["sensor"])
        .aggregate([0, 0], add, merge=merge)
        .map(lambda acc: round(acc[0] / acc[1], 6))
        .sink(averages)
    )
    return pipeline


pipeline = build()
