"""Quix Streams: ``quix_app.py`` as N processes of one consumer group, exactly-once."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bench.harness.venvs import cached_venv
from bench.peers.base import Job, Peer, Running, spawn

VERSION = "3.28.1"
# Its own virtualenv, outside the repository: quixstreams pins confluent-kafka < 2.13, and
# installing it next to the project would downgrade the project's confluent-kafka.
VENV = Path.home() / ".cache" / "processor" / f"bench-quixstreams-{VERSION}"
APP = Path(__file__).resolve().parent / "quix_app.py"


class QuixPeer(Peer):
    name: ClassVar[str] = "quix"
    title: ClassVar[str] = f"Quix Streams {VERSION}"

    @property
    def python(self) -> Path:
        return VENV / "bin" / "python"

    def prepare(self) -> None:
        check = f"import quixstreams, sys; sys.exit(quixstreams.__version__ != {VERSION!r})"
        cached_venv(VENV, f"quixstreams=={VERSION}", check)

    def start(self, job: Job) -> Running:
        procs = []
        logs = []
        for i in range(job.parallelism):
            cmd = [
                str(self.python),
                str(APP),
                job.bootstrap,
                job.input_topic,
                job.output_topic,
                job.name,
                str(job.workdir / f"quix-state-{i}"),
                str(job.interval_ms / 1000),
            ]
            log = job.workdir / f"quix-{i}.log"
            procs.append(spawn(cmd, log))
            logs.append(log)
        return Running(procs, logs)

    def settings(self) -> dict[str, object]:
        return {
            "processing_guarantee": "exactly-once",
            "commit_interval": 1.0,
            "processes": 2,
            "state": "RocksDB (default), changelog topics (default)",
            "producer_extra_config": {
                "compression.type": "lz4",
                "linger.ms": 20,
                "batch.size": 1_000_000,
            },
            "consumer_extra_config": {
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 4_194_304,
            },
            "rebalances": "both processes join at start; the steady-state warm-up keeps the "
            "rebalances outside the window",
            "pipeline": "apply(words, expand) -> group_by(word) -> stateful count -> to_topic",
        }
