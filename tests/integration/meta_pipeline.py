"""A pipeline that reads record metadata (`test_meta.py`): keys, headers, timestamps and
source positions, at a source stage and after a shuffle."""

from __future__ import annotations

from typing import Any

from processor import Meta, Pipeline


def _track(event: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """Per user a running count, with the ``source`` header of the record that made it."""
    n = state.get(0) + 1
    state.set(n)
    source = dict(state.headers).get("source")
    return [{"i": event["i"], "n": n, "source": None if source is None else source.decode()}]


def _tag(event: dict[str, Any], meta: Meta) -> list[Any]:
    headers = [[name, None if v is None else v.hex()] for name, v in meta.headers]
    return [event["i"], meta.key, meta.timestamp, meta.topic, meta.partition, meta.offset, headers]


def _after(event: dict[str, Any], meta: Meta) -> list[Any]:
    """After a shuffle: the stream's key, event time and headers; no position."""
    headers = [[name, None if v is None else v.hex()] for name, v in meta.headers]
    return [
        event["i"],
        meta.key,
        meta.timestamp,
        headers,
        [meta.topic, meta.partition, meta.offset],
    ]


def build(events: str, outcomes: str, tagged: str, shuffled: str) -> Pipeline:
    p = Pipeline()
    s = p.source(events, key="text", value="json")
    s.key_by(lambda e, m: m.key, meta=True).process(_track).sink(outcomes)
    s.map(_tag, meta=True).sink(tagged)
    s.key_by(lambda e: e["i"] % 3).map(_after, meta=True).sink(shuffled)
    return p


def build_windowed(events: str, windows: str) -> Pipeline:
    """Per Kafka key, records per event-time second: key_by(meta=True) into a window."""
    p = Pipeline()
    s = p.source(events, key="text", value="json", timestamp=lambda e: e["ts"])
    s.key_by(lambda e, m: m.key, meta=True).window(size_ms=1000).count().sink(windows)
    return p
