"""The ceiling row: ``ceiling_app.py`` as N processes of one consumer group (no output)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, spawn

APP = Path(__file__).resolve().parent / "ceiling_app.py"


class CeilingPeer(Peer):
    name: ClassVar[str] = "ceiling"
    title: ClassVar[str] = "ceiling: plain confluent-kafka readers (tokenize + count, no output)"
    # Nothing to verify: it writes nothing. Only the steady-state phase runs it.
    has_output: ClassVar[bool] = False

    def start(self, job: Job) -> Running:
        procs, logs = [], []
        for i in range(job.parallelism):
            cmd = [sys.executable, str(APP), job.bootstrap, job.input_topic, job.name]
            cmd.append(str(job.interval_ms / 1000))
            log = job.workdir / f"ceiling-{i}.log"
            procs.append(spawn(cmd, log))
            logs.append(log)
        return Running(procs, logs)

    def settings(self) -> dict[str, object]:
        return {
            "processes": 2,
            "client": "confluent-kafka Consumer, isolation.level=read_committed, one group",
            "batch": "consume(10000, 0.5 s)",
            "work": "decode, processor.jobs.wordcount.words (the word count's tokenizer), "
            "collections.Counter.update; no state store, no output, no transactions",
            "offsets": "committed asynchronously every 1 s (outside any transaction), only so "
            "that the bench measures it from the group's committed offsets like the others",
        }
