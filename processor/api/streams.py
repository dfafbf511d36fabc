"""The user's entry to a pipeline: `Pipeline`, whose sources start the typed streams of
`processor.api.dataflow` (re-exported here with `Node`, which the engine reads from here).

Calls only record a graph of `Node`s (`processor.api.graph`; nothing runs here);
`processor.plan.stages` splits the graph into stages at each ``key_by``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar, overload

from processor.api import keying
from processor.api.args import check_callable, check_ms, check_serde
from processor.api.dataflow import BoundedWindowedStream as BoundedWindowedStream
from processor.api.dataflow import KeyedStream as KeyedStream
from processor.api.dataflow import Stream as Stream
from processor.api.dataflow import WindowedStream as WindowedStream
from processor.api.graph import Graph
from processor.api.node import DEFAULT_IDLE_MS, VALUE_FORMATS, Partitioner, SourceNode
from processor.api.node import Node as Node  # re-exported: the engine imports it from here
from processor.api.node import ValueFormat as ValueFormat  # re-exported, as Node
from processor.errors import PipelineError as PipelineError  # re-exported, for users
from processor.serde import Serde
from processor.serde.protocol import TypedSerde

V = TypeVar("V")

# A job name (`processor.config`): the pipeline's name is its job's default.
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


class Pipeline(Graph):
    """A dataflow: sources, operators, sinks. Build it at import time of the user's module.

    ``name``: the job's name unless ``PROCESSOR_JOB_NAME`` says otherwise (default: the
    file's stem), the prefix of its internal topics and consumer groups::

        p = Pipeline(name="clicks-per-page")
    """

    def __init__(self, name: str | None = None) -> None:
        if name is not None and (type(name) is not str or not _JOB_NAME.fullmatch(name)):
            raise PipelineError(
                f"Pipeline(name={name!r}): letters, digits, '-' and '_', at most 100, "
                "starting with a letter or digit (it names the job's topics)"
            )
        super().__init__()
        self.name = name

    @overload
    def source(
        self,
        topic: str,
        value: TypedSerde[V],
        name: str | None = None,
        timestamp: Callable[[V], float] | None = None,
        out_of_orderness_ms: int = 0,
        idle_ms: int = DEFAULT_IDLE_MS,
        key: Any = None,
    ) -> Stream[V]: ...
    @overload
    def source(
        self,
        topic: str,
        value: ValueFormat = "text",
        name: str | None = None,
        timestamp: Callable[[Any], float] | None = None,
        out_of_orderness_ms: int = 0,
        idle_ms: int = DEFAULT_IDLE_MS,
        key: Any = None,
    ) -> Stream[Any]: ...
    def source(
        self,
        topic: str,
        value: ValueFormat | Serde = "text",
        name: str | None = None,
        timestamp: Callable[[Any], float] | None = None,
        out_of_orderness_ms: int = 0,
        idle_ms: int = DEFAULT_IDLE_MS,
        key: Any = None,
    ) -> Stream[Any]:
        """Records of an existing topic; one source task per partition.

        ``key``: the Kafka key's format ("text", "json", "bytes", or an object with
        ``loads(bytes)``), for functions given ``meta=True`` (``meta.key``); a key that
        does not decode sends its record to the DLQ, as a value that does not.
        ``p.source("carts", key="text").key_by(lambda v, meta: meta.key, meta=True)``

        Event time (used by windows and joins): ``timestamp(value)`` in milliseconds, by
        default the Kafka record's timestamp. The source's watermark is the highest timestamp
        seen minus ``out_of_orderness_ms``; a partition with no records for ``idle_ms`` does
        not hold it back.

        ``value``: ``"text"``, ``"json"``, ``"bytes"`` or a serde (`processor.serde`), e.g.
        ``p.source("clicks", value=Avro(schema))``; a record it cannot decode is dead. The
        stream is a ``Stream[Any]``, or ``Stream[V]`` for a serde whose ``loads`` returns
        ``V`` (`processor.serde.TypedSerde`).
        """
        if not isinstance(topic, str) or not topic:
            raise PipelineError("source(topic): the topic must be a non-empty string")
        if isinstance(value, str) and value not in VALUE_FORMATS:
            raise PipelineError(
                f"source({topic!r}, value={value!r}): value must be one of {VALUE_FORMATS} "
                "or a serde"
            )
        where = f"source({topic!r})"
        for other in self.sources:
            if other.topic == topic:
                # Source tasks commit their positions per topic partition in the job's group:
                # two stages on one topic would overwrite each other's.
                raise PipelineError(
                    f"{where} is read twice (source {other.name!r} reads it already): read a "
                    f"topic once and branch the stream, s = p.source({topic!r}); s.map(...); "
                    "s.filter(...)"
                )
        value_format = value if isinstance(value, str) else check_serde(value, where, topic)
        if (
            key is not None
            and key not in VALUE_FORMATS
            and not callable(getattr(key, "loads", None))
        ):
            raise PipelineError(
                f"{where} key={key!r}: one of {VALUE_FORMATS} or an object with loads()"
            )
        stamp = None if timestamp is None else check_callable(timestamp, f"{where} timestamp")
        bound = check_ms(out_of_orderness_ms, f"{where} out_of_orderness_ms")
        idle = check_ms(idle_ms, f"{where} idle_ms", positive=True)
        node = SourceNode(
            self.named(None, SourceNode, topic if name is None else name),
            None,
            False,
            topic=topic,
            value_format=value_format,
            key_format=key,
            timestamp_fn=stamp,
            out_of_orderness_ms=bound,
            idle_ms=idle,
        )
        self.add(node)
        return Stream(self, node)

    def keyed_source(
        self,
        topic: str,
        value: ValueFormat | Serde = "text",
        key: Any = "text",
        partitioner: Partitioner = "murmur2",
        name: str | None = None,
        **source: Any,
    ) -> KeyedStream[Any, Any]:
        """`source` keyed by each record's Kafka key (decoded as ``key`` says) *without a
        shuffle*: the topic's producers put a key's records in one partition, by
        ``partitioner``'s hash of the key (``"murmur2"``: Java clients and Kafka Streams;
        ``"crc32"``: librdkafka's default ``consistent_random``, confluent-kafka's), so each
        source task keeps its keys' state. A record elsewhere, or without a key, is dead
        (``misplaced_key``). ``source``: `source`'s other arguments (``timestamp`` ...).
        ``p.keyed_source("carts").process(track)``; `processor.api.keying` has an example.
        """
        head = self.source(topic, value, key=key, **source).node
        assert isinstance(head, SourceNode)
        return KeyedStream(self, keying.by_kafka_key(self, head, name, partitioner))
