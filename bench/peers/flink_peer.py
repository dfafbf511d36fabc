"""Apache Flink 2.2.1: the word count in bench/flink/, an embedded MiniCluster in one JVM.

Exactly-once checkpoints every ``interval_ms``, RocksDB keyed state with incremental
checkpoints to the job's directory, a read_committed KafkaSource and a transactional KafkaSink
that commits when a checkpoint completes.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, build_jar, run_jar

PROJECT = Path(__file__).resolve().parents[1] / "flink"
JAR = PROJECT / "target" / "flink-wordcount.jar"
# The MiniCluster runs the job manager, the task manager and both slots in this JVM; RocksDB's
# memory (Flink's managed memory, 128 MB in local execution) is outside the heap.
HEAP = ("-Xms512m", "-Xmx1g")


class FlinkPeer(Peer):
    name: ClassVar[str] = "flink"
    title: ClassVar[str] = "Apache Flink 2.2.1"

    def prepare(self) -> None:
        build_jar(PROJECT, JAR, "Flink")

    def start(self, job: Job) -> Running:
        return run_jar(JAR, HEAP, job, "flink", "flink.log")

    def settings(self) -> dict[str, object]:
        return {
            "execution": "embedded MiniCluster (java -jar), parallelism 2, 2 slots",
            "checkpointing": "EXACTLY_ONCE every 1000 ms, aligned",
            "state": "RocksDB (state.backend.type: rocksdb), incremental checkpoints to a "
            "local directory, managed memory default (128 MB in local execution)",
            "source": "KafkaSource, earliest, isolation.level=read_committed",
            "sink": "KafkaSink, DeliveryGuarantee.EXACTLY_ONCE, transaction.timeout.ms=60000, "
            "one record per count update",
            "jvm": f"java {' '.join(HEAP)} -jar, default GC",
        }
