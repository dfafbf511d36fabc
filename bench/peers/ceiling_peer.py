"""The ceiling rows: ``ceiling_app.py`` as one process per input partition (no output).

``ceiling``: read, decode, tokenize, count. ``ceiling_uncombined``: the same, and every word
also encoded and produced to a shuffle topic (non-transactionally), the least that a system
which sends every word through its shuffle must do.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from bench.harness.measure import create_topic
from bench.peers.base import Job, Peer, Running, spawn

APP = Path(__file__).resolve().parent / "ceiling_app.py"
# As many readers as this project's source tasks on the bench's input (one per partition).
PARTITIONS = 4


class CeilingPeer(Peer):
    name: ClassVar[str] = "ceiling"
    title: ClassVar[str] = "ceiling: plain confluent-kafka readers (tokenize + count, no output)"
    # Nothing to verify: it writes no output topic. Only the steady-state phase runs it.
    has_output: ClassVar[bool] = False

    def __init__(self, forward_every_word: bool = False) -> None:
        self.forward_every_word = forward_every_word
        if forward_every_word:
            self.name = "ceiling_uncombined"  # type: ignore[misc]
            self.title = (  # type: ignore[misc]
                "ceiling of the uncombined path: plain readers that also produce every word "
                "to a shuffle topic"
            )

    def shuffle_topic(self, job: Job) -> str:
        return f"{job.name}.repartition"

    def start(self, job: Job) -> Running:
        extra: list[str] = []
        if self.forward_every_word:
            create_topic(job.bootstrap, self.shuffle_topic(job), PARTITIONS)
            extra = [self.shuffle_topic(job)]
        procs, logs = [], []
        for p in range(PARTITIONS):
            cmd = [sys.executable, str(APP), job.bootstrap, job.input_topic, str(p), job.name]
            cmd += [str(job.interval_ms / 1000), *extra]
            log = job.workdir / f"{self.name}-{p}.log"
            procs.append(spawn(cmd, log))
            logs.append(log)
        return Running(procs, logs)

    def settings(self) -> dict[str, object]:
        out: dict[str, object] = {
            "processes": f"{PARTITIONS}, one per input partition (assigned), as this project "
            "runs one source task per input partition",
            "client": "this project's source-task consumer settings "
            "(processor.kafka.clients.consumer_config: read_committed, fetch.wait.max.ms=50, "
            "fetch.min.bytes=1, queued.max.messages.kbytes=65536) and its batching "
            "(consume_ready, consume_batch=5000, 50 ms wait)",
            "work": "decode, processor.jobs.wordcount.words (the word count's tokenizer), "
            "collections.Counter.update; no state store, no transactions",
            "offsets": "committed asynchronously every 1 s (outside any transaction), only so "
            "that the bench measures it from the group's committed offsets like the others",
        }
        if self.forward_every_word:
            out["forward"] = (
                "every word produced to a 4-partition topic (key = word, value = b'1'), "
                "non-transactionally, with this project's producer settings "
                "(processor.kafka.clients.producer_config: lz4, linger.ms=20, batch.size=1e6); "
                "flushed before each offset commit"
            )
        return out
