"""Hostile Avro among good records (test_sinks.py, issue #41 item 1): clicks in the Confluent
wire format, whose writers may register any schema with the registry, and linked lists in
plain Avro under a recursive schema; every good record goes out as JSON.
The registry's URL comes from TEST_SCHEMA_REGISTRY_URL (every process imports this file)."""

from __future__ import annotations

import os
from typing import Any

from processor import Pipeline
from processor.serde import Avro

CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "page", "type": "string"}, {"name": "user", "type": "string"}],
}
# A linked list: legal Avro, and as deep as its data.
NODE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}],
}


def length(node: dict[str, Any] | None) -> int:
    n = 0
    while node is not None:
        n, node = n + 1, node["next"]
    return n


def build(
    clicks: str = "clicks", lists: str = "lists", pages: str = "pages", lengths: str = "lengths"
) -> Pipeline:
    url = os.environ.get("TEST_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081")
    p = Pipeline()
    p.source(clicks, value=Avro(CLICK, registry_url=url)).sink(pages)
    p.source(lists, value=Avro(NODE)).map(length).sink(lengths)
    return p


pipeline = build()
