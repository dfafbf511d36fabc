"""Kafka Streams 4.4.0: the word count in bench/kstreams/, exactly_once_v2, RocksDB stores."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, build_jar, run_jar

PROJECT = Path(__file__).resolve().parents[1] / "kstreams"
JAR = PROJECT / "target" / "kstreams-wordcount.jar"
# Fixed heap (-Xms = -Xmx): no heap growth during the run.
HEAP = "1g"
# Tuned as Kafka Streams' and the Kafka producer's docs advise for throughput: compressed,
# larger batches with some linger for its producer (output, repartition and changelog
# records all go through it), and a record cache far larger than the corpus's vocabulary
# (50,000 words; the cache is split across the stream threads), so that each commit
# interval forwards one update per changed word. Applied after the program's own settings.
TUNING: dict[str, str] = {
    "producer.compression.type": "lz4",
    "producer.batch.size": str(512 * 1024),
    "producer.linger.ms": "20",
    "statestore.cache.max.bytes": str(256 * 1024 * 1024),
}


class KafkaStreamsPeer(Peer):
    name: ClassVar[str] = "kafka_streams"
    title: ClassVar[str] = "Kafka Streams 4.4.0"

    def prepare(self) -> None:
        build_jar(PROJECT, JAR, "Kafka Streams")

    def start(self, job: Job) -> Running:
        heap = (f"-Xms{HEAP}", f"-Xmx{HEAP}")
        tuning = [f"{k}={v}" for k, v in TUNING.items()]
        return run_jar(JAR, heap, job, "kstreams-state", "kstreams.log", tuning)

    def settings(self) -> dict[str, object]:
        return {
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": "the job's interval (1000; the second row 100, the "
            "exactly-once default)",
            "num.stream.threads": 2,
            "state": "RocksDB (default), changelog topics",
            **TUNING,
            "jvm": f"java -Xms{HEAP} -Xmx{HEAP} -jar (default GC); JIT warm-up falls in the "
            "steady-state phase's warm-up, outside its window",
        }


class KafkaStreamsPreAggPeer(KafkaStreamsPeer):
    """The same program with a combiner before the repartition (bench.PreAggregate): each task
    sums its words in a cached, logged in-memory store and forwards the partial sums at each
    commit-interval punctuation; a reduce by addition after the repartition counts them. The
    counterpart of processor's per-epoch combiner in its source tasks."""

    name: ClassVar[str] = "kafka_streams_preagg"
    title: ClassVar[str] = "Kafka Streams 4.4.0, pre-aggregating"

    def start(self, job: Job) -> Running:
        heap = (f"-Xms{HEAP}", f"-Xmx{HEAP}")
        tuning = [f"{k}={v}" for k, v in TUNING.items()]
        extra = [*tuning, "bench.preaggregate=true"]
        return run_jar(JAR, heap, job, "kstreams-state", "kstreams.log", extra)

    def settings(self) -> dict[str, object]:
        return {
            **super().settings(),
            "topology": "lines -> PreAggregate (api.Processor via KStream#process: per-task "
            "partial sums in a cached, logged in-memory KeyValueStore, forwarded and deleted "
            "at a WALL_CLOCK_TIME punctuation every commit interval) -> repartition by word "
            "-> reduce(Long::sum) in RocksDB",
            "state": "RocksDB counts and an in-memory partial-sum store, both with changelog "
            "topics",
        }
