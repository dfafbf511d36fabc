"""Records a task needs that retention deleted stop the task for good with one line; the
shuffle topic is created with explicit retention and purged below what snapshots need."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from confluent_kafka import OFFSET_END, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from bench import shuffle_size
from processor.kafka import clients
from processor.models import control
from processor.worker.task import committed_after_fencing
from tests.integration.harness import JobRun, control_messages, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _watermarks(run: JobRun, topic: str, partition: int) -> tuple[int, int]:
    consumer = clients.consumer(run.settings, **{"group.id": f"{run.job}.inspect"})
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False
        )
        return int(low), int(high)
    finally:
        consumer.close()


def _delete_everything(run: JobRun, topic: str, partition: int) -> int:
    """delete_records up to the end of the partition; returns the new log start."""
    admin = clients.admin(run.settings)
    futures = admin.delete_records([TopicPartition(topic, partition, OFFSET_END)])
    (future,) = futures.values()
    return int(future.result(30).low_watermark)


def _failed_heartbeats(run: JobRun, task: str) -> list[control.TaskStatus]:
    return [
        m.tasks[task]
        for _, m in control_messages(run)
        if isinstance(m, control.Heartbeat) and task in m.tasks and m.tasks[task].reason
    ]


def _stop_after_progress(run: JobRun, status_port: int = 0) -> None:
    run.coordinator = run._spawn(
        "coordinator", "coordinator", PROCESSOR_METRICS_PORT=str(status_port)
    )
    run.start_worker(0)
    run.start_worker(1)
    run.feed(200_000, seconds=4)
    run.wait_for_checkpoints(4)
    assert run._feeder is not None
    run._feeder.join(60)
    run.wait_for_checkpoints(2)
    for i in range(2):
        run.kill_worker(i)


def test_keyed_task_resuming_below_the_log_start_fails_once_with_the_gap(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500)
    try:
        status_port = _free_port()
        _stop_after_progress(run, status_port)
        shuffle = run.settings.shuffle_topic
        (committed,) = committed_after_fencing(run.settings, [TopicPartition(shuffle, 0)])
        checkpoint = int(json.loads(committed.metadata or "{}")["checkpoint"])
        # Records after the committed position, then retention takes all of them.
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for _ in range(10):
            producer.produce(shuffle, b"not a shuffle record", partition=0)
        assert producer.flush(30) == 0
        log_start = _delete_everything(run, shuffle, 0)
        assert log_start > committed.offset

        ports = [_free_port(), _free_port()]
        earlier = [len(run.log(f"worker-{i}")) for i in range(2)]
        for i in range(2):
            run.start_worker(i, metrics_port=ports[i])
        line = (
            f"count-0: {shuffle}[0] starts at {log_start} but checkpoint {checkpoint} resumes "
            f"at {committed.offset}: records {committed.offset}-{log_start - 1} were deleted "
            "(retention?); the state cannot be rebuilt exactly"
        )

        def logs() -> str:  # of the restarted workers
            return "".join(run.log(f"worker-{i}")[earlier[i] :] for i in range(2))

        wait_until(lambda: line in logs(), 60, "the line naming the gap")
        # Not a crash loop: the worker keeps reporting it failed with the reason, while the
        # rest of the job goes on committing.
        wait_until(lambda: len(_failed_heartbeats(run, "count-0")) >= 10, 60, "heartbeats")
        statuses = _failed_heartbeats(run, "count-0")
        assert all(s.state == "failed" and s.reason in line for s in statuses)
        acks_before = sum(
            1
            for _, m in control_messages(run)
            if isinstance(m, control.Ack) and m.task == "count-1"
        )
        wait_until(
            lambda: (
                sum(
                    1
                    for _, m in control_messages(run)
                    if isinstance(m, control.Ack) and m.task == "count-1"
                )
                >= acks_before + 5
            ),
            60,
            "count-1 to commit 5 more checkpoints",
        )
        text = logs()
        assert text.count(line) == 1, "one line, once"
        assert text.count("task count-0 started") == 1, "count-0 must not be restarted"
        assert "Traceback" not in text
        assert not run.dead_workers()
        failed = 0.0
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                for family in text_string_to_metric_families(page.read().decode()):
                    for s in family.samples:
                        if (
                            s.name == "processor_task_failed_permanently_total"
                            and s.labels.get("task") == "count-0"
                        ):
                            assert s.labels["reason"] == "records_deleted"
                            failed += s.value
        assert failed == 1

        # Visible where an operator looks: the status API (and page) and `processor status`.
        def status_shows_it() -> bool:
            url = f"http://127.0.0.1:{status_port}/api/status"
            with urllib.request.urlopen(url, timeout=10) as page:
                tasks = {t["task"]: t for t in json.load(page)["tasks"]}
            return tasks["count-0"]["state"] == "failed" and tasks["count-0"]["reason"] in line

        wait_until(status_shows_it, 30, "the status API to show count-0 failed")
        # Checkpoints cannot complete without it: they fail at once, saying why (not after
        # their timeout, with a line each), while the other tasks commit their part.
        failing = f"declined by count-0: failed for good: {shuffle}[0] starts at {log_start}"
        wait_until(lambda: failing in run.log("coordinator"), 30, "a checkpoint failed for it")
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "processor",
                "status",
                "--url",
                f"http://127.0.0.1:{status_port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0, cli.stderr
        assert f"count-0 stopped for good: {shuffle}[0] starts at {log_start}" in cli.stdout
    finally:
        run.stop()


def test_source_task_resuming_below_the_input_log_start_fails_with_the_gap(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=500, input_partitions=1)
    try:
        _stop_after_progress(run)
        topic = run.settings.input_topic
        (committed,) = committed_after_fencing(run.settings, [TopicPartition(topic, 0)])
        run.produce(b"written while the job was down %d" % i for i in range(100))
        log_start = _delete_everything(run, topic, 0)
        assert log_start > committed.offset
        earlier = [len(run.log(f"worker-{i}")) for i in range(2)]
        for i in range(2):
            run.start_worker(i)
        line = (
            f"split-0: {topic}[0] starts at {log_start} but checkpoint "
            f"{int(json.loads(committed.metadata or '{}')['checkpoint'])} resumes at "
            f"{committed.offset}: records {committed.offset}-{log_start - 1} were deleted "
            "(retention?); they can never be processed"
        )

        def logs() -> str:  # of the restarted workers
            return "".join(run.log(f"worker-{i}")[earlier[i] :] for i in range(2))

        wait_until(lambda: line in logs(), 60, "the line naming the gap")
        wait_until(lambda: len(_failed_heartbeats(run, "split-0")) >= 10, 60, "heartbeats")
        assert logs().count(line) == 1
        assert logs().count("task split-0 started") == 1
    finally:
        run.stop()


def test_shuffle_is_created_with_explicit_retention_and_purged(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300, shuffle_purge_interval_ms="500")
    try:
        run.start(workers=2)
        run.feed(300_000, seconds=6)
        run.wait_for_checkpoints(4)
        # A crash after purges: the restored tasks still find every record they need.
        run.kill_worker(0)
        run.start_worker(0)
        run.finish()
        shuffle = run.settings.shuffle_topic
        committed = committed_after_fencing(
            run.settings,
            [TopicPartition(shuffle, p) for p in range(run.settings.shuffle_partitions)],
        )
        for tp in committed:
            low, _ = _watermarks(run, shuffle, tp.partition)
            assert 0 < low <= tp.offset, (tp.partition, low, tp.offset)
        logs = run.log("worker-0") + run.log("worker-1")
        assert "were deleted (retention?)" not in logs

        admin = clients.admin(run.settings)
        resource = ConfigResource(ConfigResource.Type.TOPIC, shuffle)
        config = admin.describe_configs([resource])[resource].result(30)
        assert config["retention.ms"].value == "-1"
        assert config["cleanup.policy"].value == "delete"
    finally:
        run.stop()


def test_records_deleted_while_a_task_reads_are_not_skipped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Not only at restore: a consumer whose next record was deleted fails, never jumps."""
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300, input_partitions=1)
    try:
        run.start_coordinator(exit_when_idle=False)
        run.start_worker(0)
        run.produce(b"before the gap %d" % i for i in range(1000))
        run.wait_for_checkpoints(3)
        topic = run.settings.input_topic
        # Paused (well within the heartbeat timeout, so its tasks stay), the worker cannot
        # read what is written meanwhile before it is deleted. Several appends: a fetch that
        # was waiting at the broker is answered with the first one only.
        run.kill_worker(0, signal.SIGSTOP)
        try:
            for batch in range(5):
                run.produce(b"deleted before anyone read it %d %d" % (batch, i) for i in range(20))
            log_start = _delete_everything(run, topic, 0)
        finally:
            run.kill_worker(0, signal.SIGCONT)
        line = f"split-0: {topic}[0] starts at {log_start} but checkpoint "
        wait_until(lambda: line in run.log("worker-0"), 60, "the line naming the gap")
        assert "were deleted (retention?); they can never be processed" in run.log("worker-0")
    finally:
        run.stop()


def test_shuffle_size_stays_flat_short_run(kafka_bootstrap: str) -> None:
    """bench/shuffle_size.py for 30 s (the 10-minute run is in docs/figures.md): the records the
    shuffle retains stop growing while the records written keep growing."""
    result = shuffle_size.measure(
        kafka_bootstrap, 30, 5000, 5, None, segment_bytes="1048576", purge_interval_ms="2000"
    )
    samples = result["samples"]
    assert len(samples) >= 5
    last = samples[-1]
    assert last["written"] > 2 * last["retained"], samples
    assert result["records_verified"] > 0
