"""When a processor run's work was done: its whole output committed, all its input counted.

``processor local --until-idle`` exits only after a few checkpoints that saw no record (how it
knows the input has ended) and a clean stop; timing a backlog run to the exit would charge
this project with that wait (some 3 s at a 1 s interval), while Flink's bounded job ends with
its final checkpoint. The run is done at the completion of the checkpoint that committed its
last output record and its last input:

* the last output record (the highest Kafka timestamp over every partition's last committed
  records) was written in an epoch that ends with the first checkpoint triggered after it; that
  checkpoint's completion is when a read_committed reader can see it (at most one interval
  late, never early: a record written between a checkpoint's trigger and its barrier is
  committed by that one, earlier);
* the last checkpoint that counted input records (``records_in``, every task's) completed after
  the last record was taken in.

Both come from the job's own topics (``<job>.checkpoints`` and the output), read before the
harness deletes them.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.peers.processor_peer import completed_checkpoints

TAIL = 64  # records read back from the end of each output partition


def last_output_at(bootstrap: str, topic: str, timeout: float = 30) -> float | None:
    """The highest timestamp (s) among the last committed records of ``topic``'s partitions."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"nexmark-done-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    latest: float | None = None
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends: dict[int, int] = {}
        starts = []
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                ends[p] = high
                starts.append(TopicPartition(topic, p, max(0, high - TAIL)))
        consumer.assign(starts)
        for _ in range(int(timeout / 0.2)):
            if not ends:
                break
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    ts = msg.timestamp()[1] / 1000
                    latest = ts if latest is None else max(latest, ts)
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition] - 1:  # the last offset may be a marker
                    del ends[tp.partition]
    finally:
        consumer.close()
    return latest


def done_at(checkpoints: list[dict[str, Any]], last_output: float | None) -> float | None:
    """The completion (wall s) of the checkpoint that committed the last output and input."""
    with_input = [float(c["completed_at"]) for c in checkpoints if int(c.get("records_in") or 0)]
    candidates = [with_input[-1]] if with_input else []
    if last_output is not None:
        after = [c for c in checkpoints if float(c["triggered_at"]) >= last_output]
        if not after:
            return None
        candidates.append(float(after[0]["completed_at"]))
    return max(candidates) if candidates else None


def processor_done_at(bootstrap: str, job: str, output: str) -> float | None:
    """`done_at` of a processor run, from its topics."""
    return done_at(completed_checkpoints(bootstrap, job), last_output_at(bootstrap, output))
