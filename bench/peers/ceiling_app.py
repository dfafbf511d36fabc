"""The ceiling: a plain confluent-kafka reader of one input partition, nothing else.

    python ceiling_app.py BOOTSTRAP INPUT PARTITION GROUP COMMIT_INTERVAL_S [SHUFFLE_TOPIC]

One process per input partition, as this project runs one source task per input partition,
with the same client settings as those source tasks (``processor.kafka.clients``:
``consumer_config``, ``consume_ready`` batches of ``consume_batch`` records): read_committed,
the words of each batch with the word count's own tokenizer (processor/jobs/wordcount.py),
counted in a dict in memory. No state store, no transactions. With SHUFFLE_TOPIC (the
ceiling of the uncombined path) every word is also encoded and produced to that topic, keyed
by the word, with this project's producer settings (``producer_config``), non-transactionally:
what a Python reader that forwards every word, as the peers' repartition steps do, can reach.

Its offsets are committed every COMMIT_INTERVAL_S (asynchronously, outside any transaction)
only so that the bench measures it the way it measures the others, from the group's committed
offsets. Prints ``FIRST_RECORD <epoch ms>`` on its first record.
"""

from __future__ import annotations

import collections
import contextlib
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from processor.config import Settings  # noqa: E402
from processor.jobs.wordcount import words  # noqa: E402
from processor.kafka import clients  # noqa: E402

# The source tasks' wait for a first record when nothing is ready (processor/worker/source.py).
WAIT_S = 0.05


def main(argv: list[str]) -> None:
    bootstrap, topic, partition, group, interval, *rest = argv
    shuffle = rest[0] if rest else None
    settings = Settings(bootstrap_servers=bootstrap, job_name="ceiling")
    config = clients.consumer_config(settings, **{"group.id": group})
    # Our own logger and error callback are the engine's; the ceiling needs neither.
    for key in ("error_cb", "logger"):
        config.pop(key, None)
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, int(partition), 0)])
    producer: Producer | None = None
    if shuffle is not None:
        pconfig = clients.producer_config(settings)
        for key in ("error_cb", "logger", "transactional.id"):
            pconfig.pop(key, None)
        producer = Producer(pconfig)
    stop = [False]

    def on_term(_signum: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    counts: collections.Counter[str] = collections.Counter()
    every = float(interval)
    next_commit = time.monotonic() + every
    first = True
    batch = settings.consume_batch
    while not stop[0]:
        msgs = clients.consume_ready(consumer, batch, WAIT_S)
        if msgs:
            if first:
                first = False
                print(f"FIRST_RECORD {int(time.time() * 1000)}", flush=True)
            lines = [v.decode() for m in msgs if m.error() is None and (v := m.value())]
            found = words(lines)
            counts.update(found)
            if producer is not None and shuffle is not None:
                for word in found:
                    encoded = word.encode()
                    while True:
                        try:
                            producer.produce(shuffle, b"1", encoded)
                            break
                        except BufferError:
                            producer.poll(0.01)
                producer.poll(0)
            consumer.store_offsets(message=msgs[-1])
        if time.monotonic() >= next_commit:
            next_commit += every
            if producer is not None:
                # Forwarded before the offsets say so, as any at-least-once forwarder would.
                producer.flush(30)
            # Nothing stored yet (KafkaException _NO_OFFSET): nothing to commit.
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=True)
    if producer is not None:
        producer.flush(30)
    with contextlib.suppress(KafkaException):
        consumer.commit(asynchronous=False)
    consumer.close()
    print(f"WORDS {sum(counts.values())} DISTINCT {len(counts)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
