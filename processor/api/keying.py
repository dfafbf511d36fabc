"""A source read as keyed already (`Pipeline.keyed_source`): a topic whose producers put
each record in the partition its Kafka key hashes to (``partitioner``: see
`processor.models.partitioners`) holds all of a key's records in one partition, so one task
per partition sees all of a key and the keyed operators need no shuffle. Kafka Streams'
``groupByKey`` and Flink's ``reinterpretAsKeyedStream`` do the same.

The stream's key is the record's Kafka key, decoded by the source's ``key`` format (its
``meta.key``). The graph gets a ``key_by`` marked ``local``: `processor.plan.stages` keeps
it and the operators after it in the source's stage, whose tasks then keep state and
snapshot it as a keyed stage's do (`processor.worker.keyed_source`). A record read from
another partition than its key's is dead (``misplaced_key``): counting it under its key
there would split that key's state between two tasks.

>>> p = Pipeline()
>>> p.keyed_source("clicks", key="text").count().sink("per_user")
>>> run(p, {"clicks": [("ann", "a"), ("bob", "b"), ("ann", "c")]})
{'per_user': [('ann', 2), ('bob', 1)]}
"""

from __future__ import annotations

from typing import Any

from processor.api.graph import Graph
from processor.api.node import KeyByNode, Partitioner, SourceNode
from processor.errors import PipelineError
from processor.models.partitioners import PARTITIONERS


def by_kafka_key(
    graph: Graph, source: SourceNode, name: str | None, partitioner: Partitioner
) -> KeyByNode:
    """The local ``key_by`` after ``source``: each record keyed by its decoded Kafka key."""
    where = f"keyed_source({source.topic!r})"
    if source.key_format is None or source.key_format == "bytes":
        raise PipelineError(
            f"{where}: the records are keyed by their Kafka key decoded, so the source needs "
            "its format: key='text', 'json' or a serde (state keys are text or JSON)"
        )
    if partitioner not in PARTITIONERS:
        raise PipelineError(
            f"{where} partitioner={partitioner!r}: one of {PARTITIONERS} (how the topic's "
            "producers chose each record's partition)"
        )
    named = graph.named(source, KeyByNode, name)
    node = KeyByNode(named, source, True, fn=_kafka_key, uses_meta=True, local=partitioner)
    return graph.add(node)


def _kafka_key(_value: Any, meta: Any) -> Any:
    return meta.key
