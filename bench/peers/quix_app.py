"""Quix Streams word count, run by quix_peer.py in its own virtualenv (quixstreams pins
confluent-kafka < 2.13; the project's environment has a newer one).

    python quix_app.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR COMMIT_INTERVAL_S

Prints ``FIRST_RECORD <epoch ms>`` when the first input line reaches the dataframe.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

from quixstreams import Application  # type: ignore[import-not-found, unused-ignore]

_WORD = re.compile(r"\w+")
PRODUCER = {"compression.type": "lz4", "linger.ms": 20, "batch.size": 1_000_000}
CONSUMER = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 4_194_304}


def main(argv: list[str]) -> None:
    bootstrap, input_topic, output_topic, group, state_dir, interval = argv
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        commit_interval=float(interval),
        auto_offset_reset="earliest",
        state_dir=state_dir,
        loglevel="WARNING",
        # Client batching as every other system here gets it: lz4, larger batches, a
        # linger (librdkafka settings, passed through Quix's documented extra configs).
        producer_extra_config=PRODUCER,
        consumer_extra_config=CONSUMER,
    )
    lines = app.topic(input_topic, key_deserializer="bytes", value_deserializer="bytes")
    counts = app.topic(output_topic, key_serializer="str", value_serializer="str")
    first = [True]

    def words(line: bytes | None) -> list[str]:
        if first[0]:
            first[0] = False
            print(f"FIRST_RECORD {int(time.time() * 1000)}", flush=True)
        return _WORD.findall(line.decode().lower()) if line else []

    def count(word: str, state: Any) -> str:
        n = int(state.get("n", 0)) + 1
        state.set("n", n)
        return str(n)

    sdf = app.dataframe(lines)
    sdf = sdf.apply(words, expand=True)
    sdf = sdf.group_by(lambda word: word, name="word")
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(counts)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
