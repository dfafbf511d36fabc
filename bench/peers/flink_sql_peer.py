"""Apache Flink 2.2.1 SQL: ``bench.SqlWordCount`` in bench/flink/ (the DataStream peer's jar and
runtime), an embedded MiniCluster in one JVM, the Table API planner with mini-batch and
two-phase (local-global) aggregation.

The counterpart of processor's combiner: the tokenizer (a table function, the same Java regex
as the DataStream peer) feeds a local COUNT per mini-batch chained to the source; only the
partial counts cross the shuffle to the global COUNT, which touches each word's RocksDB state
once per mini-batch. Exactly-once checkpoints every ``interval_ms``; a read_committed Kafka
table source that commits its offsets to the group ``job.name`` on checkpoints; an upsert-kafka
sink with ``sink.delivery-guarantee = exactly-once`` (transactions committed when a checkpoint
completes).
"""

from __future__ import annotations

from typing import ClassVar

from bench.peers.base import Job, Peer, Running, build_jar, run_jar
from bench.peers.flink_peer import JAR, PROJECT

MAIN = "bench.SqlWordCount"
# As the DataStream peer: job manager, task manager and both slots in this JVM; RocksDB's
# memory (Flink's managed memory, 256 MB here) is outside the heap.
HEAP = ("-Xms512m", "-Xmx1g")
# At least rate x interval, as an expert sizes it (issue #42): the highest word rate measured
# on these machines (flink_sql kept up with 1.825 M words/s) times the 1 s interval. With
# 100,000 a batch folded about seven times less than processor's per-epoch combiner.
MINI_BATCH_SIZE = 2_000_000  # SqlWordCount.MINI_BATCH_SIZE


class FlinkSqlPeer(Peer):
    name: ClassVar[str] = "flink_sql"
    title: ClassVar[str] = "Apache Flink 2.2.1 SQL (mini-batch, two-phase)"

    def prepare(self) -> None:
        build_jar(PROJECT, JAR, "Flink")

    def start(self, job: Job) -> Running:
        return run_jar(JAR, HEAP, job, "flink", "flink-sql.log", main_class=MAIN)

    def output_writers(self, job: Job) -> int | None:
        # The sink takes a new transactional id, so a new producer id, at every checkpoint;
        # each subtask writes to every partition (Flink's key groups are not Kafka's murmur2).
        return job.parallelism

    def settings(self) -> dict[str, object]:
        return {
            "execution": "embedded MiniCluster (java -jar), parallelism 2, 2 slots; "
            "StreamTableEnvironment, streaming mode",
            "query": "INSERT INTO counts SELECT word, CAST(COUNT(*) AS STRING) FROM lines, "
            "LATERAL TABLE(words(line)) AS t(word) GROUP BY word",
            "tokenizer": 'table function words(line): Pattern.compile("\\\\w+", '
            "UNICODE_CHARACTER_CLASS) over line.toLowerCase(Locale.ROOT), as the DataStream "
            "peer",
            "table.exec.mini-batch.enabled": "true: each aggregate buffers its input and "
            "reads/writes each word's state once per batch instead of once per word",
            "table.exec.mini-batch.allow-latency": "the job's interval (1000 ms): the "
            "exactly-once sink publishes only at checkpoints anyway, so waiting up to one "
            "interval costs no visible freshness and folds the most words per batch",
            "table.exec.mini-batch.size": f"{MINI_BATCH_SIZE}: at least rate x interval at "
            "the highest rate measured (1.825 M words/s x 1 s), so that a batch ends at the "
            "interval, not at its size, and folds an epoch's words as processor's combiner "
            "does; the local aggregate's buffer is a map per word, so its heap follows the "
            "vocabulary, not the size",
            "table.optimizer.agg-phase-strategy": "TWO_PHASE: local COUNT before the "
            "shuffle, global COUNT after it (Combine + Reduce), the counterpart of "
            "processor's combiner",
            "pipeline.object-reuse": "true: no deep copy between chained operators (source, "
            "tokenizer, local aggregate)",
            "checkpointing": "EXACTLY_ONCE every 1000 ms, aligned; retained on cancellation",
            "state": "RocksDB (state.backend.type: rocksdb), incremental checkpoints to a "
            "local directory, managed memory 256 MB (the MiniCluster default is 128 MB; "
            "Flink's large-state tuning guide names managed memory as the first knob)",
            "source": "'kafka' connector, format raw (one STRING column), "
            "scan.startup.mode=earliest-offset, properties.isolation.level=read_committed, "
            "properties.group.id = job name (offsets committed on checkpoints)",
            "sink": "'upsert-kafka' connector, key.format raw (word), value.format raw (count "
            "as decimal text), sink.delivery-guarantee=exactly-once, "
            "sink.transactional-id-prefix = job name, transaction.timeout.ms=60000; producer "
            "compression.type=lz4, batch.size=524288, linger.ms=20 (as the other peers)",
            "jvm": f"java {' '.join(HEAP)} -jar, default GC",
        }
