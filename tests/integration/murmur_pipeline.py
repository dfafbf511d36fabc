"""Keys written by every kind of sink, for the murmur2 test (test_sinks.py): the default path
of a keyed stage, a key function with headers on a keyed stage, a key function on a source
stage."""

from __future__ import annotations

from processor import Pipeline


def build(
    keys: str = "keys", keyed: str = "keyed", keyed_fn: str = "keyed-fn", unkeyed_fn: str = "fn"
) -> Pipeline:
    p = Pipeline()
    lines = p.source(keys, value="text")
    by_key = lines.key_by(lambda k: k)
    by_key.sink(keyed)  # key str(key): StageChain's own path
    # A key function, and headers: records that go out through produce(headers=).
    by_key.sink(
        keyed_fn, key=lambda k, v: k.encode(), value="text", headers=lambda k, v: [("key", k)]
    )
    lines.sink(unkeyed_fn, key=lambda k, v: v, value="text")  # from a source task
    return p


pipeline = build()
