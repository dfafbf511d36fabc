"""examples/carts.py over a keyed source (`Pipeline.keyed_source`): the carts' ``process``
runs in the source's tasks with no shuffle, the count per event type after a shuffle out of
them. The harness's producer is librdkafka's with its default partitioner, so the topic is
partitioned by ``crc32``. Sources never count as idle, as in carts_never_idle.py."""

import runpy
from pathlib import Path
from typing import Any

from processor import Pipeline

EXAMPLE = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "carts.py"))


def build(cart_events: str, cart_outcomes: str, events_per_type: str) -> Pipeline:
    p = Pipeline()
    events: Any = p.keyed_source(
        cart_events,
        value="json",
        key="text",
        partitioner="crc32",
        timestamp=lambda e: e["ts"],
        out_of_orderness_ms=1000,
        idle_ms=3_600_000,
    )
    (
        events.process(EXAMPLE["track"], on_timer=EXAMPLE["expired"]).sink(
            cart_outcomes, key=lambda _k, v: v["user"], value="json", headers=EXAMPLE["outcome"]
        )
    )
    events.key_by(lambda e: e["type"]).count(emit="record").sink(events_per_type)
    return p
