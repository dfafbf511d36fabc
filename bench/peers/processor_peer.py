"""This project: ``processor local --workers N [--until-idle]`` (coordinator + N workers)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.harness.common import ms as _ms
from bench.harness.measure import percentile
from bench.peers.base import Job, Peer, Running, spawn

# The worker logs this just before a source task's first consume call (its logger: the source
# task's module, processor.worker.source, processor.runtime.source before the packages moved;
# a keyed source's, processor.worker.keyed_source).
_RESUMING = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+ processor\.(?:\w+\.)*\w*source: "
    r"\S+: resuming ",
    re.MULTILINE,
)
_COMPLETE = re.compile(r"checkpoint (\d+) complete in ([\d.]+)s: (\d+) records")

SHUFFLE_PARTITIONS = 4
# Settings whose values a results file must not record.
_SECRET = re.compile(r"SECRET|PASSWORD|KAFKA_CONFIG|ACCESS_KEY")


class ProcessorPeer(Peer):
    name: ClassVar[str] = "processor"
    title: ClassVar[str] = "processor (this project)"

    def __init__(
        self,
        checkout: Path | None = None,
        pipeline: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        """``checkout``: run the engine of another checkout of the project (its ``.venv``, from
        its directory, so that ``-m processor`` imports that checkout's code), e.g. an older
        commit to compare with; default this interpreter. ``pipeline``: ``--pipeline`` (a file
        in ``checkout``'s terms); default the built-in word count on the job's topics. ``env``:
        more environment for every process (what the pipeline file reads)."""
        self.checkout = checkout
        self.pipeline = pipeline
        self.extra_env = dict(env or {})
        # Worker processes, default the job's parallelism (as many as the peers' instances).
        # More processes share the 2 cores through the OS scheduler rather than one GIL.
        self.workers = int(os.environ.get("BENCH_PROCESSOR_WORKERS", "0")) or None

    def start(self, job: Job) -> Running:
        env = {
            **os.environ,
            **self.extra_env,
            "PROCESSOR_BOOTSTRAP_SERVERS": job.bootstrap,
            "PROCESSOR_JOB_NAME": job.name,
            "PROCESSOR_INPUT_TOPIC": job.input_topic,
            "PROCESSOR_OUTPUT_TOPIC": job.output_topic,
            "PROCESSOR_STATE_DIR": str(job.workdir / "state"),
            "PROCESSOR_CHECKPOINT_DIR": str(job.workdir / "checkpoints"),
            "PROCESSOR_CHECKPOINT_INTERVAL_MS": str(job.interval_ms),
            # As many as the input has, like the repartition topic Kafka Streams creates: one
            # keyed task per partition, so more partitions are more transactions and
            # snapshots per checkpoint (the default 8 leaves room to scale out to 8 workers).
            "PROCESSOR_SHUFFLE_PARTITIONS": str(SHUFFLE_PARTITIONS),
            # `processor local` serves metrics and its status page on 9400+ by default: off
            # here, so that a demo or a test run on this machine cannot collide with the bench.
            "PROCESSOR_METRICS_PORT": "0",
            # first_consumed_at reads the text log lines.
            "PROCESSOR_LOG_FORMAT": "text",
            "PROCESSOR_LOG_LEVEL": "INFO",
        }
        python = sys.executable
        if self.checkout is not None:
            python = str(self.checkout / ".venv" / "bin" / "python")
        workers = self.workers or job.parallelism
        cmd = [python, "-m", "processor", "local", "--workers", str(workers)]
        if self.pipeline:
            cmd += ["--pipeline", self.pipeline]
        if job.until_idle:
            cmd.append("--until-idle")
        log = job.workdir / "processor.log"
        return Running([spawn(cmd, log, env, cwd=self.checkout)], [log])

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
            "command": f"processor local --workers {self.workers or 2} (metrics port off; "
            "--until-idle in the backlog phase)"
            + (f" --pipeline {self.pipeline}" if self.pipeline else ""),
            # The bench's own PROCESSOR_* variables reach every process too (an A/B of a
            # setting is run that way), so the record has them.
            "env": {
                k: v
                for k, v in {**os.environ, **self.extra_env}.items()
                if k.startswith("PROCESSOR_") and not _SECRET.search(k)
            },
            "checkout": str(self.checkout) if self.checkout else "this one",
            "checkpoint_interval_ms": 1000,
            "shuffle_partitions": SHUFFLE_PARTITIONS,
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


def read_json_topic(
    bootstrap: str, topic: str, group: str, timeout: float = 60
) -> list[tuple[float, dict[str, Any]]]:
    """Every JSON record of the one-partition ``topic`` up to its end, with its Kafka timestamp
    (seconds); an absent topic is empty."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    out: list[tuple[float, dict[str, Any]]] = []
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return out
        tp = TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = 0
        deadline = time.monotonic() + timeout
        while position < high and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    continue
                try:
                    body = json.loads(msg.value() or b"")
                except ValueError:
                    continue
                if isinstance(body, dict):
                    out.append((msg.timestamp()[1] / 1000, body))
            # By the consumer's position, not the records' offsets: the control topic holds
            # the coordinator's lease transactions, whose markers (never returned) can be its
            # last offsets; ending by offsets waited out the whole timeout then (60 s a read).
            position = consumer.position([tp])[0].offset
    finally:
        consumer.close()
    return out


def completed_checkpoints(bootstrap: str, job: str) -> list[dict[str, Any]]:
    """The job's completed checkpoints as the coordinator recorded them in ``<job>.checkpoints``
    (id, triggered_at, completed_at, duration_s, uploaded_bytes, state_bytes, records_in, and
    per task its acknowledgement's figures), by id."""
    by_id = {
        int(body["id"]): body
        for _, body in read_json_topic(bootstrap, f"{job}.checkpoints", f"{job}.bench-history")
        if "id" in body
    }
    return [by_id[i] for i in sorted(by_id)]


def checkpoint_summary(
    records: list[dict[str, Any]], start: float | None = None, end: float | None = None
) -> dict[str, Any]:
    """Duration and size of the completed checkpoints triggered at or after ``start`` and
    completed by ``end``.

    duration: trigger to the last task's acknowledgement (the coordinator's figure).
    uploaded: what the checkpoint copied to storage (incremental: only SST files no earlier
    checkpoint of the task stored, plus the small per-checkpoint files); full: the size of
    every task's snapshot, what a non-incremental checkpoint would copy. Per phase, the
    acknowledgements of the keyed tasks (alignment, sync, upload, commit) and of the source
    tasks (sync, commit), p50 / p99 in ms.
    """
    chosen = [
        r
        for r in records
        if (start is None or float(r["triggered_at"]) >= start)
        and (end is None or float(r["completed_at"]) <= end)
    ]
    if not chosen:
        return {"completed": 0}
    durations = [float(r["duration_s"]) for r in chosen]
    uploaded = [int(r.get("uploaded_bytes", 0)) for r in chosen]
    full = [int(r.get("state_bytes", 0)) for r in chosen]
    keyed: dict[str, list[float]] = {k: [] for k in ("alignment_s", "sync_s", "upload_s")}
    keyed["commit_s"] = []
    source: dict[str, list[float]] = {"sync_s": [], "commit_s": []}
    for r in chosen:
        for task, ack in (r.get("tasks") or {}).items():
            into = source if task.startswith("split-") else keyed
            for key, values in into.items():
                values.append(float(ack.get(key, 0.0)))
    return {
        "completed": len(chosen),
        "duration_ms_p50": _ms(percentile(durations, 50)),
        "duration_ms_p99": _ms(percentile(durations, 99)),
        "duration_ms_max": _ms(max(durations)),
        "uploaded_bytes_p50": percentile(uploaded, 50),
        "uploaded_bytes_max": max(uploaded),
        "uploaded_bytes_total": sum(uploaded),
        "full_bytes_p50": percentile(full, 50),
        "full_bytes_max": max(full),
        "full_bytes_total": sum(full),
        # What incremental snapshots saved: uploaded / what full snapshots would have copied.
        "uploaded_over_full_pct": round(100 * sum(uploaded) / sum(full), 2) if sum(full) else None,
        "keyed_ack_ms": {
            k.removesuffix("_s"): {"p50": _ms(percentile(v, 50)), "p99": _ms(percentile(v, 99))}
            for k, v in keyed.items()
        },
        "source_ack_ms": {
            k.removesuffix("_s"): {"p50": _ms(percentile(v, 50)), "p99": _ms(percentile(v, 99))}
            for k, v in source.items()
        },
    }


def checkpoint_markers(records: list[dict[str, Any]]) -> list[dict[str, float]]:
    """For the plot: when each checkpoint was triggered and completed (wall time)."""
    return [
        {
            "id": int(r["id"]),
            "triggered_at": round(float(r["triggered_at"]), 3),
            "completed_at": round(float(r["completed_at"]), 3),
        }
        for r in records
    ]


def pipeline_breakdown(bootstrap: str, job: str, start: float, end: float) -> dict[str, Any]:
    """Where the time goes from a checkpoint trigger to its committed output, per checkpoint
    triggered in [start, end], from the control topic (Kafka timestamps of the trigger and of
    every task's acknowledgement, which a task sends right after its commit) and the figures
    in the acknowledgements. p50 / p99 over the checkpoints, in ms:

    * ``trigger_to_sources_committed``: trigger record -> the last source task acknowledged
      (trigger delivery to the worker, the source noticing it, flush, barriers, offsets,
      commit);
    * ``sources_committed_to_keyed_committed``: -> the last keyed task acknowledged (fetch of
      the now committed shuffle records and barriers, alignment, flush to RocksDB and the
      output, offsets, RocksDB checkpoint, upload, then the commit);
    * ``trigger_to_keyed_committed``: the sum, the pipeline's share of a record's latency;
    * per keyed acknowledgement: ``alignment``, ``sync``, ``upload``, ``commit``, and
      ``keyed_unaccounted`` = its time from the last source ack to its own ack minus those
      (polling and waiting on the consumer, and the GIL).
    """
    messages = read_json_topic(bootstrap, f"{job}.control", f"{job}.bench-breakdown")
    return breakdown(messages, start, end)


def breakdown(
    messages: list[tuple[float, dict[str, Any]]], start: float, end: float
) -> dict[str, Any]:
    """`pipeline_breakdown` of the control topic's (timestamp, body) records."""
    # The coordinator sends a pending checkpoint's trigger again every interval (a source
    # that started late must see it): the first record is the trigger.
    triggers: dict[int, float] = {}
    for ts, b in messages:
        if b.get("kind") == "trigger" and start <= ts <= end:
            checkpoint = int(b["checkpoint"])
            triggers[checkpoint] = min(ts, triggers.get(checkpoint, ts))
    acks: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for ts, b in messages:
        if b.get("kind") == "ack" and int(b.get("checkpoint", -1)) in triggers:
            acks.setdefault(int(b["checkpoint"]), []).append((ts, b))
    tasks = {b["task"] for entries in acks.values() for _, b in entries}
    series: dict[str, list[float]] = {
        "trigger_to_sources_committed": [],
        "sources_committed_to_keyed_committed": [],
        "trigger_to_keyed_committed": [],
        "alignment": [],
        "sync": [],
        "upload": [],
        "commit": [],
        "keyed_unaccounted": [],
        "source_commit": [],
    }
    for checkpoint, entries in acks.items():
        if {b["task"] for _, b in entries} != tasks:
            continue  # not every task acknowledged it (declined, or at the edges)
        triggered = triggers[checkpoint]
        sources = [(ts, b) for ts, b in entries if b["task"].startswith("split-")]
        keyed = [(ts, b) for ts, b in entries if not b["task"].startswith("split-")]
        if not sources or not keyed:
            continue
        sources_done = max(ts for ts, _ in sources)
        keyed_done = max(ts for ts, _ in keyed)
        series["trigger_to_sources_committed"].append(sources_done - triggered)
        series["sources_committed_to_keyed_committed"].append(keyed_done - sources_done)
        series["trigger_to_keyed_committed"].append(keyed_done - triggered)
        series["source_commit"] += [float(b.get("commit_s", 0.0)) for _, b in sources]
        for ts, b in keyed:
            parts = {k: float(b.get(f"{k}_s", 0.0)) for k in ("alignment", "sync", "upload")}
            parts["commit"] = float(b.get("commit_s", 0.0))
            for k, v in parts.items():
                series[k].append(v)
            series["keyed_unaccounted"].append(max(0.0, ts - sources_done - sum(parts.values())))
    return {
        "checkpoints": len(series["trigger_to_keyed_committed"]),
        **{
            k: {"p50": _ms(percentile(v, 50)), "p99": _ms(percentile(v, 99))}
            for k, v in series.items()
        },
    }


def blocked_in_checkpoints(
    bootstrap: str, job: str, start: float, end: float, cpu_s: float | None = None
) -> dict[str, Any]:
    """Time the task threads spent in synchronous checkpoint steps within [start, end].

    From the acknowledgements on ``<job>.control``: ``sync_s``, the task thread's time on the
    checkpoint (source: flush of the epoch's combiner, barriers, handing the offsets and the
    commit to the background; keyed: flush to RocksDB and the output, RocksDB checkpoint; both:
    any wait for the previous checkpoint's commit), summed over every task's checkpoints
    acknowledged in the window, as a share of the tasks' total time in it (tasks x window).
    Alignment, the snapshot upload and the commit's round trips run while processing
    continues and are reported, not counted.

    ``cpu_pct``: the CPU time of those steps (``sync_cpu_s``, the task threads' own CPU)
    as a share of ``cpu_s``, all the CPU the job's processes used in the window. A task
    thread waiting for the GIL counts as blocked in ``blocked_pct`` while the process runs
    other tasks' work; the CPU share is what the checkpoints cost the job's throughput.
    """
    acks = [
        body
        for ts, body in read_json_topic(bootstrap, f"{job}.control", f"{job}.bench-control")
        if body.get("kind") == "ack" and start <= ts <= end
    ]
    tasks = {a["task"] for a in acks}
    if not tasks or end <= start:
        return {"tasks": 0, "blocked_pct": None}
    blocked = sum(float(a["sync_s"]) for a in acks)
    sync_cpu = sum(float(a.get("sync_cpu_s", 0.0)) for a in acks)
    flush_cpu = sum(float(a.get("flush_cpu_s", 0.0)) for a in acks)
    align = sum(float(a.get("alignment_s", 0.0)) for a in acks)
    upload = sum(float(a.get("upload_s", 0.0)) for a in acks)
    task_seconds = len(tasks) * (end - start)
    return {
        "tasks": len(tasks),
        "acks": len(acks),
        "window_s": round(end - start, 3),
        "blocked_s": round(blocked, 3),
        "blocked_pct": round(100 * blocked / task_seconds, 2),
        "sync_cpu_s": round(sync_cpu, 3),
        "job_cpu_s": round(cpu_s, 3) if cpu_s else None,
        "cpu_pct": round(100 * sync_cpu / cpu_s, 2) if cpu_s else None,
        # The epoch's output (shuffle records, counts) is work any system does when it
        # emits; the rest is what snapshots and barriers themselves cost.
        "flush_cpu_s": round(flush_cpu, 3),
        "cpu_pct_excl_output_flush": (
            round(100 * (sync_cpu - flush_cpu) / cpu_s, 2) if cpu_s else None
        ),
        "alignment_s": round(align, 3),
        "upload_s": round(upload, 3),
        "commit_s": round(sum(float(a.get("commit_s", 0.0)) for a in acks), 3),
        # The figure by kind of task, in % of all tasks' time: what dominates it.
        "blocked_pct_by_step": {
            f"{kind} sync": round(
                100
                * sum(
                    float(a["sync_s"])
                    for a in acks
                    if a["task"].startswith("split-") == (kind == "source")
                )
                / task_seconds,
                2,
            )
            for kind in ("source", "keyed")
        },
    }
