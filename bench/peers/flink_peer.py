"""Apache Flink 2.2.1: the word count in bench/flink/, an embedded MiniCluster in one JVM.

Exactly-once checkpoints every ``interval_ms``, RocksDB keyed state with incremental
checkpoints to the job's directory, a read_committed KafkaSource (offsets committed to the group
``job.name`` on checkpoints) and a transactional KafkaSink that commits when a checkpoint
completes. Tuned as Flink's docs advise for throughput (issue #29): object reuse, the sink's
producer batched like every other peer's, more managed memory for RocksDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, build_jar, run_jar

PROJECT = Path(__file__).resolve().parents[1] / "flink"
JAR = PROJECT / "target" / "flink-wordcount.jar"
# The MiniCluster runs the job manager, the task manager and both slots in this JVM; RocksDB's
# memory (Flink's managed memory, 256 MB here; 128 MB by default in local execution) is outside
# the heap.
HEAP = ("-Xms512m", "-Xmx1g")


class FlinkPeer(Peer):
    name: ClassVar[str] = "flink"
    title: ClassVar[str] = "Apache Flink 2.2.1"

    def prepare(self) -> None:
        build_jar(PROJECT, JAR, "Flink")

    def start(self, job: Job) -> Running:
        return run_jar(JAR, HEAP, job, "flink", "flink.log")

    def output_writers(self, job: Job) -> int | None:
        # The sink takes a new transactional id, so a new producer id, at every checkpoint;
        # each subtask writes to every partition (Flink's key groups are not Kafka's murmur2).
        return job.parallelism

    def settings(self) -> dict[str, object]:
        return {
            "execution": "embedded MiniCluster (java -jar), parallelism 2, 2 slots",
            "checkpointing": "EXACTLY_ONCE every 1000 ms, aligned",
            "state": "RocksDB (state.backend.type: rocksdb), incremental checkpoints to a "
            "local directory, managed memory 256 MB (the MiniCluster default is 128 MB; "
            "Flink's large-state tuning guide names managed memory as the first knob)",
            "object reuse": "env.getConfig().enableObjectReuse(): no deep copy between "
            "chained operators (no function keeps or modifies its input)",
            "source": "KafkaSource, earliest, isolation.level=read_committed, group = job "
            "name (offsets committed on checkpoints)",
            "sink": "KafkaSink, DeliveryGuarantee.EXACTLY_ONCE, transaction.timeout.ms=60000, "
            "one record per count update; producer compression.type=lz4, batch.size=524288, "
            "linger.ms=20 (as the other peers)",
            "jvm": f"java {' '.join(HEAP)} -jar, default GC",
        }
