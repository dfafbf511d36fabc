"""The bench's join (``--pipeline bench/experiments/join_pipeline.py``): views joined with
clicks of them.

    views (JSON, event time = Kafka timestamp) -> key_by id  \\
                                                             join within 10 s -> map -> output
    clicks (JSON, event time = its "at") -> key_by view id   /

Topics from the environment (bench/experiments/join_skew.py sets them per run): BENCH_VIEWS_TOPIC,
BENCH_CLICKS_TOPIC, BENCH_OUTPUT_TOPIC. The output carries the later event time of the pair, so
that a reader can tell each pair's end-to-end latency.
"""

from __future__ import annotations

import os
from typing import Any

from processor.api.streams import Pipeline

WITHIN_MS = 10_000


def pair(p: list[dict[str, Any]]) -> dict[str, Any]:
    view, click = p
    return {"v": view["id"], "c": click["id"], "t": max(view["at"], click["at"])}


def join_pipeline(views_topic: str, clicks_topic: str, output_topic: str) -> Pipeline:
    p = Pipeline()
    views = p.source(views_topic, value="json", name="views")
    clicks = p.source(clicks_topic, value="json", name="clicks", timestamp=lambda c: c["at"])
    (
        views.key_by(lambda v: v["id"], name="views-by-id")
        .join(clicks.key_by(lambda c: c["view"], name="clicks-by-view"), within_ms=WITHIN_MS)
        .map(pair, name="pair")
        .sink(output_topic, name="out")
    )
    return p


pipeline = join_pipeline(
    os.environ.get("BENCH_VIEWS_TOPIC", "bench.views"),
    os.environ.get("BENCH_CLICKS_TOPIC", "bench.clicks"),
    os.environ.get("BENCH_OUTPUT_TOPIC", "bench.view-clicks"),
)
