"""Runs a user pipeline as real processes (coordinator + workers) on topics of its own, and
checks its committed output against the reference run of the same input."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    TopicPartition,
)

from processor.kafka import clients
from processor.plan.load import load_pipeline
from tests import reference
from tests.integration.harness import JobRun, wait_until

Record = tuple[bytes | None, bytes | None, dict[str, bytes]]  # key, value, headers

_LOADED = re.compile(r" complete in [\d.]+s: [1-9]\d* records")


class PipelineRun(JobRun):
    """The pipeline that ``build(**topics)`` of ``module`` returns, run by every process.

    ``topics`` maps build()'s parameters to topic names; each gets the job's name in front,
    so that a run shares no topic with another one. The processes load a two-line pipeline
    file in ``workdir`` that calls build(); this process loads the same file for the
    reference run. ``topic_prefix``: the topics of another job's run instead (a job started
    from that one's savepoint, with ``checkpoint_dir`` and ``from_savepoint`` settings).
    """

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        module: Path,
        topics: Mapping[str, str],
        source_partitions: int = 2,
        interval_ms: int = 300,
        topic_prefix: str = "",
        **settings: str,
    ) -> None:
        super().__init__(bootstrap, workdir, 0, interval_ms, **settings)
        self.bootstrap = bootstrap
        self.source_partitions = source_partitions
        prefix = topic_prefix or self.job
        self.topics = {param: f"{prefix}.{name}" for param, name in topics.items()}
        spec = workdir / "pipeline.py"
        build = f"runpy.run_path({str(module)!r})['build']"
        spec.write_text(f"import runpy\n\npipeline = {build}(**{self.topics!r})\n")
        self.env["PROCESSOR_PIPELINE"] = str(spec)
        self.pipeline, _ = load_pipeline(str(spec))
        self._admin = clients.admin(self.settings)
        for source in self.pipeline.sources:
            clients.ensure_topic(self._admin, source.topic, source_partitions)
        self.inputs: dict[str, list[bytes]] = defaultdict(list)

    def feed_topic(self, param: str, values: list[bytes], seconds: float) -> None:
        """``values`` into build()'s topic ``param`` in the background, holding half-way
        (see `kill_mid_stream`)."""
        topic = self.topics[param]
        self.inputs[topic].extend(values)
        self.feed_values(values, seconds, lambda chunk: self.send(topic, chunk), True)

    def feed_topics(self, values: Mapping[str, list[bytes]], seconds: float) -> None:
        """Several of build()'s topics fed side by side, chunk by chunk, as `feed_topic`."""
        items = [(self.topics[param], v) for param, vs in values.items() for v in vs]
        random.Random(len(items)).shuffle(items)
        for topic, value in items:
            self.inputs[topic].append(value)

        def send(chunk: list[tuple[str, bytes]]) -> None:
            for topic in {t for t, _ in chunk}:
                self.send(topic, [v for t, v in chunk if t == topic])

        self.feed_values(items, seconds, send, True)

    def feed_records(
        self,
        param: str,
        records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]],
        seconds: float,
    ) -> None:
        """``(key, value, headers, partition or None)`` records into build()'s topic
        ``param``, as `feed_topic` (``inputs`` gets the values only)."""
        topic = self.topics[param]
        self.inputs[topic].extend(value for _, value, _, _ in records)

        def send(
            chunk: list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]],
        ) -> None:
            for key, value, headers, partition in chunk:
                placed = {} if partition is None else {"partition": partition}
                self._produce(topic, value, key=key, headers=headers, **placed)
            self._flush()

        self.feed_values(records, seconds, send, True)

    def kill_mid_stream(self, index: int) -> None:
        """SIGKILL worker ``index`` once half of the feed is in and a checkpoint has committed
        input of every source partition, then let the other half come and start its
        replacement (which must resume from that checkpoint, not from the beginning)."""
        wait_until(self.halfway.is_set, 60, "half of the input")
        wait_until(lambda: _LOADED.search(self.log("coordinator")), 60, "a checkpoint of input")
        wait_until(self._sources_committed, 60, "committed positions in every source partition")
        assert " started on " in self.log(f"worker-{index}"), f"worker-{index} runs no task"
        self.kill_worker(index)
        self.resume_feed()
        self.start_worker(index)

    def _sources_committed(self) -> bool:
        wanted = [
            TopicPartition(s.topic, p)
            for s in self.pipeline.sources
            for p in range(self.source_partitions)
        ]
        config = {"bootstrap.servers": self.bootstrap}
        try:
            committed = clients.committed_offsets(config, self.settings.group_id, wanted, 30)
        except KafkaException:
            return False  # a coordinator still loading (a fresh broker): ask again
        return all(tp.offset > 0 for tp in committed)

    def verify(self) -> reference.Result:
        """Every sink, read back committed, against the reference run of the input: an
        aggregation's changelog by its last value per key, or by each key's full sequence of
        updates when its aggregations emit per record (`reference.SinkOutput.sequences`
        says when the order is the reference's); any other sink as a multiset of records
        (no loss, no duplicate); the DLQ as the reference's dead records, by where
        (operator, or source for undecodable input) and kind of error. Returns the reference
        run."""
        expected = reference.run(self.pipeline, self.inputs)
        for topic, output in expected.sinks.items():
            got = read_committed(self.bootstrap, topic)
            if output.updates:
                _same(topic, updates_per_key(got), output.sequences())
            elif output.changelog:
                _same(topic, last_per_key(got), output.final())
            else:
                records = [(k, v) for part in got.values() for k, v, _ in part]
                _same(topic, Counter(records), output.multiset())
        source_names = {s.topic: s.name for s in self.pipeline.sources}
        dead: Counter[tuple[str, str]] = Counter()
        for part in read_committed(self.bootstrap, self.settings.dlq_topic).values():
            for _, _, headers in part:
                where = headers["operator"].decode()  # a source's name: it did not decode
                name = source_names.get(where, where)
                dead[name, _kind(headers["error"].decode())] += 1
        _same("dlq", dead, Counter((name, _kind(error)) for name, error in expected.dead))
        return expected


def _kind(error: str) -> str:
    """``KeyError``, ``not JSON``: an error's kind, without the details that depend on the
    order records met in (a sum's type so far)."""
    return error.partition(":")[0]


def _same(what: str, got: Mapping[Any, object], want: Mapping[Any, object]) -> None:
    wrong = sorted((repr(k), got.get(k), want.get(k)) for k in got.keys() | want.keys())
    wrong = [w for w in wrong if w[1] != w[2]]
    assert not wrong, f"{what}: {len(wrong)} keys differ (key, got, expected): {wrong[:5]}"


def last_per_key(partitions: Mapping[int, list[Record]]) -> dict[bytes | None, bytes | None]:
    """A changelog's final value per key; every key's updates in one partition, in order."""
    final: dict[bytes | None, bytes | None] = {}
    home: dict[bytes | None, int] = {}
    for partition, records in partitions.items():
        for key, value, _ in records:
            assert home.setdefault(key, partition) == partition, f"{key!r} in two partitions"
            final[key] = value
    return final


def updates_per_key(partitions: Mapping[int, list[Record]]) -> dict[bytes | None, list[bytes]]:
    """Every update per key, in order; every key's updates in one partition."""
    updates: dict[bytes | None, list[bytes]] = {}
    home: dict[bytes | None, int] = {}
    for partition, records in partitions.items():
        for key, value, _ in records:
            assert home.setdefault(key, partition) == partition, f"{key!r} in two partitions"
            assert value is not None, f"{key!r}: an update without a value"
            updates.setdefault(key, []).append(value)
    return updates


def read_committed(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, list[Record]]:
    """Every committed record of ``topic`` per partition, in log order, read by a plain
    read_committed consumer (no client or setting of the engine's). Fails when a partition
    does not reach its end: a transaction left open."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        out: dict[int, list[Record]] = {p: [] for p in partitions}
        ends = {}
        for p in partitions:
            _, high = clients.watermark_offsets(consumer, TopicPartition(topic, p))
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends:
            assert time.monotonic() < deadline, (
                f"{topic}: partitions {sorted(ends)} not read to their end in {timeout}s"
            )
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, f"{topic}: {msg.error()}"
                raw = msg.headers() or []
                pairs = raw.items() if isinstance(raw, dict) else raw
                headers = {k: v for k, v in pairs if isinstance(v, bytes)}
                out[msg.partition() or 0].append((msg.key(), msg.value(), headers))
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
    finally:
        consumer.close()
    return out
