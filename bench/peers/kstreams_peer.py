"""Kafka Streams 4.4.0: the word count in bench/kstreams/, exactly_once_v2, RocksDB stores."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, spawn

PROJECT = Path(__file__).resolve().parents[1] / "kstreams"
JAR = PROJECT / "target" / "kstreams-wordcount.jar"
_FIRST = re.compile(r"^FIRST_RECORD (\d+)$", re.MULTILINE)
# Fixed heap (-Xms = -Xmx): no heap growth during the run.
HEAP = "1g"
# Tuned as Kafka Streams' and the Kafka producer's docs advise for throughput: compressed,
# larger batches with some linger for its producer (output, repartition and changelog
# records all go through it), and a record cache far larger than the corpus's vocabulary
# (50,000 words; the cache is split across the stream threads), so that each commit
# interval forwards one update per changed word. Applied after the program's own settings.
TUNING: dict[str, str] = {
    "producer.compression.type": "lz4",
    "producer.batch.size": str(512 * 1024),
    "producer.linger.ms": "20",
    "statestore.cache.max.bytes": str(256 * 1024 * 1024),
}


class KafkaStreamsPeer(Peer):
    name: ClassVar[str] = "kafka_streams"
    title: ClassVar[str] = "Kafka Streams 4.4.0"

    def prepare(self) -> None:
        sources = [PROJECT / "pom.xml", *PROJECT.glob("src/**/*")]
        if JAR.exists() and all(p.stat().st_mtime <= JAR.stat().st_mtime for p in sources):
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("mvn not found: Maven builds the Kafka Streams peer")
        done = subprocess.run(
            [mvn, "-q", "-B", "-Dstyle.color=never", "package"],
            cwd=PROJECT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0 or not JAR.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"building {PROJECT} failed: {' | '.join(tail)}")

    def start(self, job: Job) -> Running:
        java = shutil.which("java") or "java"
        cmd = [
            java,
            f"-Xms{HEAP}",
            f"-Xmx{HEAP}",
            "-jar",
            str(JAR),
            job.bootstrap,
            job.input_topic,
            job.output_topic,
            job.name,
            str(job.workdir / "kstreams-state"),
            str(job.parallelism),
            str(job.interval_ms),
            *(f"{k}={v}" for k, v in TUNING.items()),
        ]
        log = job.workdir / "kstreams.log"
        return Running([spawn(cmd, log)], [log])

    def first_consumed_at(self, running: Running) -> float | None:
        stamps = [int(m) / 1000 for m in _FIRST.findall(running.log_text())]
        return min(stamps) if stamps else None

    def settings(self) -> dict[str, object]:
        return {
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": "the job's interval (1000; the second row 100, the "
            "exactly-once default)",
            "num.stream.threads": 2,
            "state": "RocksDB (default), changelog topics",
            **TUNING,
            "jvm": f"java -Xms{HEAP} -Xmx{HEAP} -jar (default GC); JIT warm-up falls in the "
            "steady-state phase's warm-up, outside its window",
        }
