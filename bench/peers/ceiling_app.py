"""The ceiling: a plain confluent-kafka reader that decodes, tokenizes and counts, nothing else.

    python ceiling_app.py BOOTSTRAP INPUT GROUP COMMIT_INTERVAL_S

One process of a consumer group (run two: they split the partitions), read_committed,
batched ``consume``; the words of each batch with the word count's own tokenizer
(processor/jobs/wordcount.py), counted in a dict in memory. No state store, no output, no
transactions: its offsets are committed every COMMIT_INTERVAL_S (asynchronously, outside any
transaction) only so that the bench measures it the way it measures the others, from the
group's committed offsets. Prints ``FIRST_RECORD <epoch ms>`` on its first record.
"""

from __future__ import annotations

import collections
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer  # noqa: E402

from processor.jobs.wordcount import words  # noqa: E402

BATCH = 10_000


def main(argv: list[str]) -> None:
    bootstrap, topic, group, interval = argv
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            # Offsets are stored as consume() hands the records out and committed here, on
            # this process's schedule.
            "enable.auto.commit": False,
        }
    )
    stop = [False]

    def on_term(_signum: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    consumer.subscribe([topic])
    counts: collections.Counter[str] = collections.Counter()
    every = float(interval)
    next_commit = time.monotonic() + every
    first = True
    while not stop[0]:
        msgs = consumer.consume(BATCH, 0.5)
        if msgs:
            if first:
                first = False
                print(f"FIRST_RECORD {int(time.time() * 1000)}", flush=True)
            lines = [v.decode() for m in msgs if m.error() is None and (v := m.value())]
            counts.update(words(lines))
        if time.monotonic() >= next_commit:
            next_commit += every
            if msgs or counts:
                consumer.commit(asynchronous=True)
    consumer.commit(asynchronous=False)
    consumer.close()
    print(f"WORDS {sum(counts.values())} DISTINCT {len(counts)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
