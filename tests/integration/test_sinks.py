"""Sinks against the real broker: keyed records land in the partition a Java producer puts the
same key in (murmur2), from every kind of sink; and a pipeline reads and writes Avro through a
real Confluent-compatible schema registry (Apicurio Registry's ccompat API), hostile records
among good ones included."""

from __future__ import annotations

import json
import random
import struct
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.kafka import clients
from processor.localkafka.broker import LocalBroker, _java
from processor.serde import Avro
from processor.serde.avro import REQUEST_TIMEOUT_S
from processor.serde.avro_bounds import MAX_SCHEMA_BYTES
from tests.integration import avro_hostile_pipeline as hostile
from tests.integration.avro_pipeline import CLICK
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.registry import ApicurioRegistry, RegistryError
from tests.registry_stand_in import count_deserializer_calls, count_serializer_calls
from tests.unit.test_avro_bounds import linked, wire, zigzag

HERE = Path(__file__).resolve().parent
PARTITIONS = 7

# The Java client's default partitioner, through a real KafkaProducer: one partition a line.
_JAVA = """
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KeyPartitions {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        List<String> keys = Files.readAllLines(Paths.get(args[2]), StandardCharsets.UTF_8);
        List<String> partitions = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (String key : keys) {
                byte[] k = key.getBytes(StandardCharsets.UTF_8);
                sent.add(producer.send(new ProducerRecord<>(args[1], k, new byte[0])));
            }
            for (Future<RecordMetadata> f : sent) {
                partitions.add(Integer.toString(f.get().partition()));
            }
        }
        Files.write(Paths.get(args[3]), partitions, StandardCharsets.UTF_8);
    }
}
"""


def _keys() -> list[str]:
    rng = random.Random(23)
    words = ["user", "clé", "用户", "k", "cart", "Ω"]
    keys = {f"{rng.choice(words)}-{rng.randrange(10**9)}" for _ in range(1200)}
    return sorted(keys)[:1000]


def _java_partitions(bootstrap: str, topic: str, keys: list[str], workdir: Path) -> list[int]:
    """The partition a Java KafkaProducer (kafka-clients of the broker's own distribution)
    with its default partitioner sends each key to."""
    libs = LocalBroker(port=19092, controller_port=19093, data_dir=workdir).fetch()
    java = Path(_java()).resolve()
    javac = java.parent / "javac"
    if not javac.is_file():
        pytest.skip(f"no javac beside {java}")
    source = workdir / "KeyPartitions.java"
    source.write_text(_JAVA)
    classpath = f"{workdir}:{libs}/*"
    subprocess.run(
        [str(javac), "-cp", f"{libs}/*", "-d", str(workdir), str(source)], check=True, timeout=300
    )
    (workdir / "keys.txt").write_text("\n".join(keys) + "\n", encoding="utf-8")
    out = workdir / "partitions.txt"
    subprocess.run(
        [str(java), "-cp", classpath, "KeyPartitions", bootstrap, topic, str(workdir / "keys.txt"),
         str(out)],
        check=True,
        timeout=300,
        capture_output=True,
    )  # fmt: skip
    return [int(line) for line in out.read_text().split()]


def test_keyed_sink_records_land_in_the_partition_a_java_producer_picks(
    kafka_bootstrap: str, new_topic: object, tmp_path: Path
) -> None:
    keys = _keys()
    assert len(keys) == 1000
    java_topic = new_topic(PARTITIONS)  # type: ignore[operator]
    java = dict(
        zip(keys, _java_partitions(kafka_bootstrap, java_topic, keys, tmp_path), strict=True)
    )
    assert len(set(java.values())) == PARTITIONS
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path / "run",
        HERE / "murmur_pipeline.py",
        {"keys": "keys", "keyed": "keyed", "keyed_fn": "keyed-fn", "unkeyed_fn": "fn"},
        shuffle_partitions="3",
    )
    admin = clients.admin(run.settings)
    sinks = [run.topics[t] for t in ("keyed", "keyed_fn", "unkeyed_fn")]
    for topic in sinks:
        clients.ensure_topic(admin, topic, PARTITIONS)
    try:
        run.start(workers=1)
        run.feed_topic("keys", [k.encode() for k in keys], seconds=1)
        run.resume_feed()
        run.drain(timeout=180)
        for topic in sinks:
            placed: dict[str, int] = {}
            for partition, records in read_committed(kafka_bootstrap, topic).items():
                for key, value, headers in records:
                    placed[(key or b"").decode()] = partition
                    if topic == run.topics["keyed_fn"]:
                        assert headers == {"key": key} and value == key, (key, value, headers)
            assert len(placed) == 1000, topic
            wrong = {k: (p, java[k]) for k, p in placed.items() if p != java[k]}
            assert not wrong, f"{topic}: {len(wrong)} keys elsewhere than Java's: {list(wrong)[:5]}"
    finally:
        run.stop()


# -- Avro through a schema registry ---------------------------------------------------------


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Confluent-compatible registry for this module: Apicurio Registry (Maven
    Central, Java 21+). Without Java 21 the wire format is still tested against a local
    stand-in of its REST API (tests/unit/test_serde.py)."""
    server = ApicurioRegistry(tmp_path_factory.mktemp("registry"))
    try:
        server.start(timeout=240)
    except RegistryError as exc:
        if "Java 21" in str(exc):
            pytest.skip(str(exc))
        raise
    try:
        yield server.url
    finally:
        # Shown with a failure of the module's last test: was the registry still up, and what
        # did it say last (a registry hung or gone left a request waiting in one CI run).
        alive = server.running()
        print(f"Apicurio Registry running at teardown: {alive}; its log ends with:")
        lines = server.log_file.read_text(errors="replace").splitlines()
        print("\n".join(lines[-40:]))
        server.stop()


def test_avro_pipeline_through_a_schema_registry(
    kafka_bootstrap: str, registry_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SCHEMA_REGISTRY_URL", registry_url)  # for every process
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        HERE / "avro_pipeline.py",
        {"clicks": "clicks", "counts": "counts", "tagged": "tagged"},
        shuffle_partitions="2",
    )
    clicks_topic, counts_topic = run.topics["clicks"], run.topics["counts"]
    # The input, written by confluent-kafka's own serializer with the registry.
    # As the engine's own serde does (processor/serde/avro.py): a timeout, and the subject
    # named <topic>-value without asking the registry for the topic's "associations" (CI saw
    # that request wait for ever on Apicurio, after its 404).
    registry = SchemaRegistryClient({"url": registry_url, "timeout": REQUEST_TIMEOUT_S})
    write = AvroSerializer(
        registry,
        json.dumps(CLICK),
        conf={"subject.name.strategy": topic_subject_name_strategy},
    )
    at_clicks = SerializationContext(clicks_topic, MessageField.VALUE)
    rng = random.Random(5)
    clicks = [
        {"page": f"p{rng.randrange(12)}", "user": f"u{rng.randrange(50)}"} for _ in range(600)
    ]
    raw = [write(c, at_clicks) for c in clicks]
    bad = [b"plain json, no magic byte", Avro(CLICK).dumps(clicks[0])]  # dead records
    try:
        run.start(workers=2)
        run.feed_topic("clicks", raw[:300] + bad + raw[300:], seconds=2)
        run.resume_feed()
        run.drain(timeout=180)
        expected = run.verify()  # every sink and the DLQ against the reference run
        assert len(expected.dead) == 2
        # Read back independently: the wire format, the schema id the registry gave the
        # subject "<topic>-value", and the counts.
        read = AvroDeserializer(registry)
        at_counts = SerializationContext(counts_topic, MessageField.VALUE)
        latest = registry.get_latest_version(f"{counts_topic}-value")
        final: dict[str, int] = {}
        for records in read_committed(kafka_bootstrap, counts_topic).values():
            for key, value, _ in records:
                assert value is not None and value[0] == 0
                assert struct.unpack(">I", value[1:5])[0] == latest.schema_id
                final[(key or b"").decode()] = read(value, at_counts)
        assert final == dict(Counter(c["page"] for c in clicks))
        tagged = [r for part in read_committed(kafka_bootstrap, run.topics["tagged"]).values()
                  for r in part]  # fmt: skip
        assert Counter(
            (k, Avro(CLICK).loads(v or b"")["page"], h["page"]) for k, v, h in tagged
        ) == (Counter((c["user"].encode(), c["page"], c["page"].encode()) for c in clicks))
    finally:
        run.stop()


def test_registry_records_are_confluents_bytes_on_a_real_registry(
    registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Avro(registry_url=...)` writes what confluent-kafka's serializer writes on Apicurio,
    itself calling the serializer for the first record and for a value its compiled writer is
    not sure of (a bool where a long goes), not for the others; and reads what its
    deserializer reads without calling it (Apicurio's schema has no rules)."""
    schema = {
        "type": "record",
        "name": "Outcome",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "total", "type": "long"},
            {"name": "note", "type": ["null", "string"]},
        ],
    }
    topic = f"outcomes-{random.randrange(10**9)}"
    registry = SchemaRegistryClient({"url": registry_url, "timeout": REQUEST_TIMEOUT_S})
    theirs = AvroSerializer(
        registry, json.dumps(schema), conf={"subject.name.strategy": topic_subject_name_strategy}
    )
    at_topic = SerializationContext(topic, MessageField.VALUE)
    values = [
        {"user": f"u{i}", "total": (i - 20) * 10**9, "note": None if i % 3 else "é" * i}
        for i in range(60)
    ]
    values[30]["total"] = True
    expected = [theirs(v, at_topic) for v in values]
    calls = count_serializer_calls(monkeypatch)
    ours = Avro(schema, registry_url=registry_url).for_topic(topic)
    assert [ours.dumps(v) for v in values] == expected
    assert len(calls) == 2
    their_reader = AvroDeserializer(
        registry, json.dumps(schema), conf={"subject.name.strategy": topic_subject_name_strategy}
    )
    read = [their_reader(raw, at_topic) for raw in expected]
    reads = count_deserializer_calls(monkeypatch)
    our_reader = Avro(schema, registry_url=registry_url).for_topic(topic)
    assert [our_reader.loads(raw) for raw in expected] == read
    assert reads == []


def test_hostile_avro_records_are_dead_records_and_no_worker_dies(
    kafka_bootstrap: str, registry_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #41 item 1: among good records, a linked list 10,000 deep (plain Avro, a
    recursive schema), a click whose writer registered a recursive schema (a flat reader
    skips the field fastavro must walk), a click declaring 2^60 null items, and clicks
    under writer schemas the source refuses (another type, an oversized one)."""
    monkeypatch.setenv("TEST_SCHEMA_REGISTRY_URL", registry_url)
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        HERE / "avro_hostile_pipeline.py",
        {"clicks": "clicks", "lists": "lists", "pages": "pages", "lengths": "lengths"},
    )
    subject = f"{run.topics['clicks']}-value"
    registry = SchemaRegistryClient({"url": registry_url, "timeout": REQUEST_TIMEOUT_S})
    write = AvroSerializer(
        registry,
        json.dumps(hostile.CLICK),
        conf={"subject.name.strategy": topic_subject_name_strategy},
    )
    at_clicks = SerializationContext(run.topics["clicks"], MessageField.VALUE)
    rng = random.Random(41)
    clicks = [
        write({"page": f"p{rng.randrange(9)}", "user": f"u{rng.randrange(9)}"}, at_clicks)
        for _ in range(300)
    ]
    click = clicks[0][5:]  # an Avro body of the reader's schema

    def writer_schema(extra: Any) -> int:
        fields = [*hostile.CLICK["fields"], extra]
        text = json.dumps({**hostile.CLICK, "fields": fields})
        return int(registry.register_schema(subject, Schema(text, "AVRO")))

    tail = {"name": "tail", "type": ["null", hostile.NODE], "default": None}
    nulls = {"name": "x", "type": {"type": "array", "items": "null"}, "default": []}
    big = {"name": "big", "type": "null", "default": None, "doc": "x" * MAX_SCHEMA_BYTES}
    other = {**hostile.CLICK, "name": "Other"}
    other_id = registry.register_schema("other-value", Schema(json.dumps(other), "AVRO"))
    bad_clicks = [
        wire(writer_schema(tail), click + zigzag(1) + linked(10_000)),
        wire(writer_schema(nulls), click + zigzag(1 << 60) + zigzag(0)),
        wire(writer_schema(big), click + zigzag(0)),
        wire(other_id, click),
    ]
    lists = [linked(1 + i % 40) for i in range(200)]
    bad_lists = [linked(10_000)]
    try:
        run.start(workers=2)
        run.feed_topics(
            {"clicks": clicks[:150] + bad_clicks + clicks[150:], "lists": lists + bad_lists},
            seconds=2,
        )
        run.resume_feed()
        try:
            run.drain(timeout=180)
        finally:
            exits = {i: run.workers[i].poll() for i in run.dead_workers()}
            assert not exits, f"workers exited (index: code): {exits}\n{run.log_tails()}"
        expected = run.verify()  # every sink and the DLQ against the reference run
        assert len(expected.dead) == len(bad_clicks) + len(bad_lists)
        letters = read_committed(kafka_bootstrap, run.settings.dlq_topic).values()
        dead = Counter(value for part in letters for _, value, _ in part)
        assert dead == Counter(bad_clicks + bad_lists)  # each one once, as it came
        lengths = read_committed(kafka_bootstrap, run.topics["lengths"]).values()
        assert sorted(int(v or b"") for part in lengths for _, v, _ in part) == sorted(
            1 + i % 40 for i in range(200)
        )
        logs = run.log("worker-0") + run.log("worker-1")
        for reason in ("too_deep", "too_large", "schema_refused"):
            assert f"({reason} at " in logs, reason
    finally:
        run.stop()
