"""Apache Flink 2.2.1: the word count in bench/flink/, an embedded MiniCluster in one JVM.

Exactly-once checkpoints every ``interval_ms``, RocksDB keyed state with incremental
checkpoints to the job's directory, a read_committed KafkaSource and a transactional KafkaSink
that commits when a checkpoint completes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Peer, Running, spawn

PROJECT = Path(__file__).resolve().parents[1] / "flink"
JAR = PROJECT / "target" / "flink-wordcount.jar"
# The MiniCluster runs the job manager, the task manager and both slots in this JVM; RocksDB's
# memory (Flink's managed memory, 128 MB in local execution) is outside the heap.
HEAP = ("-Xms512m", "-Xmx1g")
_FIRST = re.compile(r"^FIRST_RECORD (\d+)$", re.MULTILINE)


class FlinkPeer(Peer):
    name: ClassVar[str] = "flink"
    title: ClassVar[str] = "Apache Flink 2.2.1"

    def prepare(self) -> None:
        sources = [PROJECT / "pom.xml", *PROJECT.glob("src/**/*")]
        if JAR.exists() and all(p.stat().st_mtime <= JAR.stat().st_mtime for p in sources):
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("mvn not found: Maven builds the Flink peer")
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
            *HEAP,
            "-jar",
            str(JAR),
            job.bootstrap,
            job.input_topic,
            job.output_topic,
            job.name,
            str(job.workdir / "flink"),
            str(job.parallelism),
            str(job.interval_ms),
        ]
        log = job.workdir / "flink.log"
        return Running([spawn(cmd, log)], [log])

    def first_consumed_at(self, running: Running) -> float | None:
        stamps = [int(m) / 1000 for m in _FIRST.findall(running.log_text())]
        return min(stamps) if stamps else None

    def settings(self) -> dict[str, object]:
        return {
            "execution": "embedded MiniCluster (java -jar), parallelism 2, 2 slots",
            "checkpointing": "EXACTLY_ONCE every 1000 ms, aligned",
            "state": "RocksDB (state.backend.type: rocksdb), incremental checkpoints to a "
            "local directory, managed memory default (128 MB in local execution)",
            "source": "KafkaSource, earliest, isolation.level=read_committed",
            "sink": "KafkaSink, DeliveryGuarantee.EXACTLY_ONCE, transaction.timeout.ms=60000, "
            "one record per count update",
            "jvm": f"java {' '.join(HEAP)} -jar, default GC",
        }
