"""This project: ``processor local --workers N [--until-idle]`` (coordinator + N workers)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import datetime
from typing import Any, ClassVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.peers.base import Job, Peer, Running, spawn

# The worker logs this just before a source task's first consume call.
_RESUMING = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+ processor\.runtime\.source: "
    r"\S+: resuming ",
    re.MULTILINE,
)
_COMPLETE = re.compile(r"checkpoint (\d+) complete in ([\d.]+)s: (\d+) records")


class ProcessorPeer(Peer):
    name: ClassVar[str] = "processor"
    title: ClassVar[str] = "processor (this project)"

    def start(self, job: Job) -> Running:
        env = {
            **os.environ,
            "PROCESSOR_BOOTSTRAP_SERVERS": job.bootstrap,
            "PROCESSOR_JOB_NAME": job.name,
            "PROCESSOR_INPUT_TOPIC": job.input_topic,
            "PROCESSOR_OUTPUT_TOPIC": job.output_topic,
            "PROCESSOR_STATE_DIR": str(job.workdir / "state"),
            "PROCESSOR_CHECKPOINT_DIR": str(job.workdir / "checkpoints"),
            "PROCESSOR_CHECKPOINT_INTERVAL_MS": str(job.interval_ms),
            # `processor local` serves metrics and its status page on 9400+ by default: off
            # here, so that a demo or a test run on this machine cannot collide with the bench.
            "PROCESSOR_METRICS_PORT": "0",
            # first_consumed_at reads the text log lines.
            "PROCESSOR_LOG_FORMAT": "text",
            "PROCESSOR_LOG_LEVEL": "INFO",
        }
        cmd = [sys.executable, "-m", "processor", "local", "--workers", str(job.parallelism)]
        if job.until_idle:
            cmd.append("--until-idle")
        log = job.workdir / "processor.log"
        return Running([spawn(cmd, log, env)], [log])

    def first_consumed_at(self, running: Running) -> float | None:
        # asctime is local time with milliseconds; the earliest source task to start wins.
        # It is logged right before the first consume() call: conservative by one fetch.
        stamps = [
            datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for m in _RESUMING.finditer(running.log_text())
        ]
        return min(stamps) if stamps else None

    def settings(self) -> dict[str, object]:
        return {
            "command": "processor local --workers 2 --until-idle (metrics port off)",
            "checkpoint_interval_ms": 1000,
            "shuffle_partitions": 8,
            "state": "RocksDB (rocksdict), snapshots to a local checkpoint dir",
        }


def checkpoint_stats(running: Running) -> dict[str, Any]:
    """Completed checkpoints from the coordinator's log lines."""
    found = [(int(i), float(d), int(n)) for i, d, n in _COMPLETE.findall(running.log_text())]
    durations = sorted(d for _, d, _ in found)
    return {
        "completed": len(found),
        "with_input": sum(1 for *_, n in found if n > 0),
        "duration_s_median": durations[len(durations) // 2] if durations else None,
        "duration_s_max": durations[-1] if durations else None,
    }


def blocked_in_checkpoints(bootstrap: str, job: str, start: float, end: float) -> dict[str, Any]:
    """Time the task threads spent in synchronous checkpoint steps within [start, end].

    From the acknowledgements on ``<job>.control``: ``sync_s`` (source: flush of the epoch's
    combiner, barriers, offsets; keyed: flush to RocksDB, offsets, RocksDB checkpoint) plus
    ``commit_s`` (the transaction commit), summed over every task's checkpoints acknowledged
    in the window, as a share of the tasks' total time in it (tasks x window). Alignment and
    the snapshot upload run while processing continues and are reported, not counted.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{job}.bench-control",
            "enable.auto.commit": False,
        }
    )
    topic = f"{job}.control"
    acks: list[dict[str, Any]] = []
    try:
        tp = TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = 0
        deadline = time.monotonic() + 60
        while position < high and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    continue
                position = max(position, (msg.offset() or 0) + 1)
                ts = msg.timestamp()[1] / 1000
                try:
                    body = json.loads(msg.value() or b"")
                except ValueError:
                    continue
                if body.get("kind") == "ack" and start <= ts <= end:
                    acks.append(body)
    finally:
        consumer.close()
    tasks = {a["task"] for a in acks}
    if not tasks or end <= start:
        return {"tasks": 0, "blocked_pct": None}
    blocked = sum(float(a["sync_s"]) + float(a["commit_s"]) for a in acks)
    align = sum(float(a.get("alignment_s", 0.0)) for a in acks)
    upload = sum(float(a.get("upload_s", 0.0)) for a in acks)
    task_seconds = len(tasks) * (end - start)
    return {
        "tasks": len(tasks),
        "acks": len(acks),
        "window_s": round(end - start, 3),
        "blocked_s": round(blocked, 3),
        "blocked_pct": round(100 * blocked / task_seconds, 2),
        "alignment_s": round(align, 3),
        "upload_s": round(upload, 3),
    }
