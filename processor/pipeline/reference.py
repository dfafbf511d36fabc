"""A pipeline run directly, in memory, one record at a time: the result the engine must match.

Tests compute the expected output with it from the records they wrote, independently of the
engine's stages, shuffles, combiners, checkpoints and recoveries. Aggregations emit an update
per record here and one per key and checkpoint in the engine, so a sink fed by an aggregation
is a *changelog*: compare its final value per key (`SinkOutput.final`); compare any other
sink's records as a multiset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.pipeline.api import Node, Pipeline
from processor.pipeline.ops import (
    UNSET,
    RecordError,
    decode,
    folder,
    key_text,
    sink_key,
    sink_value,
)
from processor.pipeline.plan import plan
from processor.pipeline.sinks import encode_one

SinkRecord = tuple[bytes | None, bytes]


@dataclass
class SinkOutput:
    changelog: bool
    records: list[SinkRecord] = field(default_factory=list)

    def final(self) -> dict[bytes | None, bytes]:
        """The last value per key."""
        return dict(self.records)

    def multiset(self) -> Counter[SinkRecord]:
        return Counter(self.records)


class DictState:
    """One key's state of a ``process`` operator, kept in a dict."""

    def __init__(self, store: dict[tuple[str, str], Any], node: str, key: str) -> None:
        self._store = store
        self._at = (node, key)

    def get(self, default: Any = None) -> Any:
        return self._store.get(self._at, default)

    def set(self, value: Any) -> None:
        self._store[self._at] = value

    def delete(self) -> None:
        self._store.pop(self._at, None)


@dataclass
class Result:
    sinks: dict[str, SinkOutput]
    dead: list[tuple[str, str]]  # (operator, error) of each record that went to the DLQ


def run(pipeline: Pipeline, inputs: Mapping[str, Iterable[bytes | None]]) -> Result:
    """Every source topic's records (in order) through the pipeline."""
    plan(pipeline)  # the same validation the engine applies
    state: dict[tuple[str, str], Any] = {}
    folders = {n: folder(n) for n in pipeline.nodes if n.aggregated}
    result = Result({n.topic: SinkOutput(_changelog(n)) for n in pipeline.sinks}, [])

    def push(node: Node, key: Any, value: Any) -> None:
        for child in node.children:
            try:
                apply(child, key, value)
            except RecordError as exc:
                result.dead.append((child.name, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a user function's failure is a dead record
                result.dead.append((child.name, f"{type(exc).__name__}: {exc}"))

    def apply(node: Node, key: Any, value: Any) -> None:
        fn = node.fn
        kind = node.kind
        if kind == "map":
            assert fn is not None
            push(node, key, fn(value))
        elif kind == "filter":
            assert fn is not None
            if fn(value):
                push(node, key, value)
        elif kind == "flat_map":
            assert fn is not None
            for out in list(fn(value)):
                push(node, key, out)
        elif kind == "key_by":
            assert fn is not None
            new_key = fn(value)
            key_text(new_key)  # a key that cannot be shuffled is a dead record
            push(node, new_key, value)
        elif node.aggregated:
            at = (node.name, key_text(key))
            state[at] = folders[node](state.get(at, UNSET), value)
            push(node, key, state[at])
        elif kind == "process":
            assert fn is not None
            handle = DictState(state, node.name, key_text(key))
            for out in list(fn(value, handle)):
                push(node, key, out)
        elif kind == "sink":
            if node.sink_spec is not None:
                k, v, _ = encode_one(node.sink_spec, node.keyed, key, value)
                record = (k, v)
            else:
                record = (sink_key(key) if node.keyed else None, sink_value(value))
            result.sinks[node.topic].records.append(record)
        else:
            raise ValueError(f"unknown operator {node!r}")

    for source in pipeline.sources:
        for raw in inputs.get(source.topic, ()):
            if raw is None:
                continue
            try:
                value = decode(source.value_format, raw)
            except RecordError as exc:
                result.dead.append((source.name, str(exc)))
                continue
            push(source, None, value)
    return result


def _changelog(sink: Node) -> bool:
    node: Node | None = sink
    while node is not None:
        if node.aggregated:
            return True
        node = node.parent
    return False
