"""Apache Flink 2.2.1 DataStream with a pre-aggregation before the shuffle:
``bench.PreAggWordCount`` in bench/flink/ (the DataStream peer's jar and runtime).

The counterpart of processor's per-epoch combiner and of Kafka Streams' pre-aggregating
variant, as an expert writes it on the DataStream API: a custom operator chained to the
tokenizer folds each source subtask's words into a map of partial counts and emits them in
``prepareSnapshotPreBarrier`` (before each checkpoint barrier, so the map is empty at every
snapshot and the flush is exactly once), at the end of input, or at 1,000,000 distinct words;
a keyed sum behind the shuffle adds each partial to the word's count in RocksDB.
"""

from __future__ import annotations

from typing import ClassVar

from bench.peers.base import Job, Running, run_jar
from bench.peers.flink_peer import HEAP, JAR, FlinkPeer

MAIN = "bench.PreAggWordCount"


class FlinkPreAggPeer(FlinkPeer):
    name: ClassVar[str] = "flink_preagg"
    title: ClassVar[str] = "Apache Flink 2.2.1 DataStream, pre-aggregating"

    def start(self, job: Job) -> Running:
        return run_jar(JAR, HEAP, job, "flink", "flink-preagg.log", main_class=MAIN)

    def settings(self) -> dict[str, object]:
        return super().settings() | {
            "pre-aggregation": "PreAggWordCount.PreAggregate, an AbstractStreamOperator "
            "chained to the tokenizer (Flink 2's default chaining, ALWAYS): a HashMap of "
            "partial counts per source subtask, emitted in prepareSnapshotPreBarrier, at "
            "endInput and at 1,000,000 keys; then keyBy(word) and a RocksDB ValueState sum "
            "that writes each new count",
        }
