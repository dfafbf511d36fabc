"""Avro in and out through a schema registry (test_sinks.py): clicks in the Confluent wire
format, counted per page into Avro longs with the registry, and written back as plain Avro
keyed by user with a header.
The registry's URL comes from TEST_SCHEMA_REGISTRY_URL (every process imports this file)."""

from __future__ import annotations

import os

from processor import Pipeline
from processor.serde import Avro

CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "page", "type": "string"}, {"name": "user", "type": "string"}],
}


def build(clicks: str = "clicks", counts: str = "counts", tagged: str = "tagged") -> Pipeline:
    url = os.environ.get("TEST_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081")
    p = Pipeline()
    events = p.source(clicks, value=Avro(CLICK, registry_url=url))
    # Per page, its count as an Avro long in the wire format (subject "<counts>-value").
    events.key_by(lambda c: c["page"]).count().sink(counts, value=Avro({"type": "long"}, url))
    events.sink(
        tagged,
        key=lambda _k, c: c["user"],
        value=Avro(CLICK),
        headers=lambda _k, c: [("page", c["page"].encode())],
    )
    return p


pipeline = build()
