"""Run by deploy/compose-test.sh inside the compose network, in the processor image.

Reads everything the producer wrote to the input topic and counts its words directly, then
waits until the committed output holds as many words (or the deadline passes) and compares
every word's final count with the direct count. Prints one line; exit 0 only when exact.

    python /check.py SECONDS
"""

from __future__ import annotations

import collections
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from processor.commands.counts import read_final_counts
from processor.config import Settings
from processor.jobs.wordcount import words
from processor.kafka import clients


def direct_count(settings: Settings) -> collections.Counter[str]:
    # The group of `processor counts`: the user's own login may look it up (compose ACLs).
    consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.reader"})
    try:
        partitions = clients.topic_partitions(consumer, settings.input_topic) or 0
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(settings.input_topic, p), 10)[1]
            for p in range(partitions)
        }
        consumer.assign(
            [TopicPartition(settings.input_topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        lines: list[str] = []
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                lines.append((msg.value() or b"").decode("utf-8", "replace"))
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    left.discard(msg.partition() or 0)
        if left:
            raise SystemExit(f"could not read the input topic to its end (partitions {left})")
    finally:
        consumer.close()
    return collections.Counter(words(lines))


def main() -> int:
    wait_s = float(sys.argv[1]) if len(sys.argv) > 1 else 300
    settings = Settings()
    expected = direct_count(settings)
    total = sum(expected.values())
    deadline = time.monotonic() + wait_s
    while True:
        final = read_final_counts(settings, settings.output_topic)
        if sum(final.values()) >= total or time.monotonic() > deadline:
            break
        time.sleep(2)
    wrong = {w for w in expected.keys() | final.keys() if expected.get(w) != final.get(w)}
    got = sum(final.values())
    if wrong or got != total:
        print(
            f"MISMATCH: output has {got:,} words, the input {total:,}; {len(wrong):,} of "
            f"{len(expected):,} distinct words differ, e.g. {sorted(wrong)[:5]}"
        )
        return 1
    print(f"exact: {total:,} words, {len(expected):,} distinct, every count equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
