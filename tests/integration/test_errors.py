"""Errors a user can see (issue #23), against the real broker: a dead record of a keyed stage
in the DLQ as its JSON with the headers saying where and why, and PROCESSOR_ON_ERROR=stop:
the job stops at the failing record with nothing of its epoch committed, says why, and
stops the same way when run again."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from processor.config import load_settings
from processor.kafka import clients
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.integration.poison import send

FAILING = Path(__file__).resolve().parent / "failing.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _record_at(bootstrap: str, topic: str, partition: int, offset: int) -> bytes:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"at-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for _ in range(50):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                assert msg.offset() == offset
                return msg.value() or b""
        raise AssertionError(f"no record at {topic}[{partition}]@{offset}")
    finally:
        consumer.close()


def _failing_run(kafka_bootstrap: str, tmp_path: Path, **settings: str) -> PipelineRun:
    """The job of failing.py on one source partition and two shuffle partitions."""
    topics = {"events": "events", "totals": "totals"}
    settings = {"shuffle_partitions": "2", **settings}
    return PipelineRun(kafka_bootstrap, tmp_path, FAILING, topics, 1, 300, **settings)


def _run_to_idle(run: PipelineRun) -> None:
    """Three users' 60 events, the 31st bad, through one worker until the job is idle."""
    events = _events(users=3, per_user=20, bad=31)
    send(run._producer, [(run.topics["events"], v, None, 0) for v in events])
    run.start_coordinator()
    run.start_worker(0)
    run.wait_idle(120)


def _events(users: int, per_user: int, bad: int) -> list[bytes]:
    """Events of ``users`` users in turn; the ``bad``-th one makes the user function raise."""
    out = []
    for i in range(users * per_user):
        event: dict[str, Any] = {"id": i, "user": f"u{i % users}", "n": 1}
        if i == bad:
            event["bad"] = True
        out.append(json.dumps(event).encode())
    return out


def test_a_dead_record_of_a_keyed_stage_is_its_json_with_where_and_why(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # No purges: to read the shuffle record the position names.
    run = _failing_run(kafka_bootstrap, tmp_path, shuffle_purge_interval_ms="0")
    try:
        _run_to_idle(run)

        letters = [
            r
            for part in read_committed(kafka_bootstrap, run.settings.dlq_topic).values()
            for r in part
        ]
        assert len(letters) == 1
        key, value, headers = letters[0]
        assert key is None
        assert value == b'{"id":31,"user":"u1","n":1,"bad":true}'  # its JSON, not a repr
        assert headers["operator"] == b"track"
        error = b"BadEvent: cannot track event 31"
        assert headers["error"] == error
        trace = headers["traceback"]
        assert trace.startswith(b"Traceback (most recent call last):\n")
        assert b"in _track\n" in trace and trace.endswith(error + b"\n")
        assert len(trace) <= 4096
        # A keyed stage knows the shuffle record it read the value in.
        shuffle = f"{run.job}.by-user".encode()
        assert headers["topic"] == shuffle
        partition, offset = int(headers["partition"]), int(headers["offset"])
        assert headers["task"] == f"by-user-{partition}".encode()
        at = _record_at(kafka_bootstrap, shuffle.decode(), partition, offset)
        assert b'"bad":true' in at  # that very shuffle record carried it

        totals = [
            json.loads(v or b"")
            for part in read_committed(kafka_bootstrap, run.topics["totals"]).values()
            for _, v, _ in part
        ]
        assert max(t["total"] for t in totals if t["user"] == "u1") == 19  # 20 less the dead one

        log = run.log("worker-0")
        where = f"(function_error at track) from {shuffle.decode()}[{partition}]@{offset}"
        assert where in log and "BadEvent: cannot track event 31" in log
        assert log.count("Traceback") == 1
    finally:
        run.stop()


def test_dlq_mode_metadata_keeps_no_record_bytes_and_retention_is_set_on_start(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """PROCESSOR_DLQ_MODE=metadata: the dead record's DLQ entry says where and why, with no
    byte of the record; PROCESSOR_DLQ_RETENTION_MS is set on a DLQ topic made before with
    another retention (as after a change of the setting)."""
    run = _failing_run(kafka_bootstrap, tmp_path, dlq_mode="metadata", dlq_retention_ms="3600000")
    admin = clients.admin(run.settings)
    dlq = run.settings.dlq_topic
    clients.ensure_topic(admin, dlq, 1, {"retention.ms": "86400000"})
    try:
        _run_to_idle(run)
        letters = [r for part in read_committed(kafka_bootstrap, dlq).values() for r in part]
        assert len(letters) == 1
        key, value, headers = letters[0]
        assert key is None and not value
        assert headers["operator"] == b"track" and headers["error"] == b"BadEvent"
        assert headers["reason"] == b"function_error" and "traceback" not in headers
        assert int(headers["length"]) == len(b'{"id":31,"user":"u1","n":1,"bad":true}')
        assert headers["topic"] == f"{run.job}.by-user".encode()
        resource = ConfigResource(ConfigResource.Type.TOPIC, dlq)
        config = admin.describe_configs([resource])[resource].result(30)
        assert config["retention.ms"].value == "3600000"
    finally:
        run.stop()


def test_on_error_stop_shows_the_task_stopped_on_the_status_page_and_in_a_metric(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    worker_port, coordinator_port = _free_port(), _free_port()
    run = _failing_run(kafka_bootstrap, tmp_path, on_error="stop")
    run.env["PROCESSOR_METRICS_PORT"] = str(coordinator_port)  # the worker gets its own
    try:
        send(run._producer, [(run.topics["events"], v, None, 0) for v in _events(3, 20, 31)])
        run.start_coordinator(exit_when_idle=False)
        run.start_worker(0, metrics_port=worker_port)

        def stopped() -> list[dict[str, Any]]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{coordinator_port}/api/status") as r:
                    return [t for t in json.load(r)["tasks"] if t["state"] == "stopped"]
            except OSError:  # not serving yet
                return []

        wait_until(lambda: bool(stopped()), 90, "a stopped task on the status page")
        (task,) = stopped()
        assert task["task"].startswith("by-user-")
        assert "failed at track (function_error): BadEvent: cannot track event 31" in task["reason"]
        with urllib.request.urlopen(f"http://127.0.0.1:{coordinator_port}/") as page:
            assert "cannot track event 31" in page.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{worker_port}/metrics") as page:
            text = page.read().decode()
        gauges = {
            (s.labels["task"], s.labels["reason"]): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "processor_task_stopped" and s.labels.get("job_name") == run.job
        }
        assert gauges == {(task["task"], "function_error"): 1.0}
        assert run.dead_workers() == []  # the worker stays up: no crash, no restart loop
        dlq = read_committed(kafka_bootstrap, run.settings.dlq_topic, timeout=10)
        assert not any(dlq.values())  # stopped: nothing dead-lettered
    finally:
        run.stop()


# -- processor local with PROCESSOR_ON_ERROR=stop ------------------------------------------------

_STOP_LINE = re.compile(r"job stopped: task (\S+): (a record .*)")


def _local(env: dict[str, str], log: Path) -> tuple[int, str]:
    with log.open("w") as out:
        local = subprocess.Popen(
            [sys.executable, "-m", "processor", "local", "--workers", "1"],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = local.wait(180)
        except subprocess.TimeoutExpired:
            os.killpg(local.pid, signal.SIGKILL)
            raise AssertionError(f"processor local went on: {log.read_text()[-3000:]}") from None
    return code, log.read_text(errors="replace")


def test_on_error_stop_ends_processor_local_with_exit_1_and_again_after_a_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    job = f"stop-{uuid.uuid4().hex[:6]}"
    lines, out, parsed = f"{job}.lines", f"{job}.out", f"{job}.parsed"
    spec = tmp_path / "pipeline.py"
    spec.write_text(
        f"import runpy\n\npipeline = runpy.run_path({str(FAILING)!r})['counts']"
        f"(lines={lines!r}, out={out!r}, parsed={parsed!r})\n"
    )
    env = {
        "PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "PROCESSOR_JOB_NAME": job,
        "PROCESSOR_PIPELINE": str(spec),
        "PROCESSOR_STATE_DIR": str(tmp_path / "state"),
        "PROCESSOR_CHECKPOINT_DIR": str(tmp_path / "chk"),
        "PROCESSOR_CHECKPOINT_INTERVAL_MS": "300",
        "PROCESSOR_METRICS_PORT": "0",
        "PROCESSOR_ON_ERROR": "stop",
    }
    settings = load_settings(bootstrap_servers=kafka_bootstrap, job_name=job)
    clients.ensure_topic(clients.admin(settings), lines, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    good = [f"u{i % 4},1".encode() for i in range(200)]
    send(producer, [(lines, v, None, 0) for v in good])
    log = tmp_path / "first.log"
    # The good records first, committed: then the failing record's batch, where u9 appears
    # only, before and after the bad line.
    first = subprocess.Popen(
        [sys.executable, "-m", "processor", "local", "--workers", "1"],
        env={**os.environ, **env},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def summed() -> bool:
            try:
                rows = read_committed(kafka_bootstrap, out, 30).values()
            except KeyError:  # not created yet
                return False
            return [v for p in rows for _, v, _ in p].count(b"50") >= 4

        wait_until(summed, 120, "the good sums")
        batch = [b"u9,1"] * 50 + [b"u9,oops"] + [b"u9,1"] * 50
        bad_offset = len(good) + 50
        send(producer, [(lines, v, None, 0) for v in batch])
        code = first.wait(120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert code == 1, text[-3000:]
    assert "Traceback (most recent call last)" in text
    assert "ValueError: invalid literal for int() with base 10: 'oops'" in text
    stops = _STOP_LINE.findall(text)
    assert stops, text[-3000:]
    task, message = stops[0]
    assert task == f"{lines}-0"  # the source stage's task
    assert message.startswith(
        f"a record of {lines}[0]@{bad_offset} failed at parse (function_error): ValueError: "
    )

    def sink() -> list[tuple[bytes | None, bytes | None]]:
        both = [*read_committed(kafka_bootstrap, out).values()]
        both += read_committed(kafka_bootstrap, parsed).values()
        return [(k, v) for p in both for k, v, _ in p]

    # Nothing of the failing epoch is committed: no record of u9, whose records are all in it
    # (neither parsed, written by the failing stage, nor summed downstream).
    assert [(k, v) for k, v in sink() if k == b"u9" or b'"u9"' in (v or b"")] == []
    assert sum(1 for _, v in sink() if v is not None and b'"user":"u1"' in v) == 50
    before = sink()

    code, again = _local(env, tmp_path / "second.log")
    assert code == 1, again[-3000:]
    assert "Traceback (most recent call last)" in again
    assert [m for _, m in _STOP_LINE.findall(again)][:1] == [message]  # the same stop
    assert sink() == before  # and still nothing of that epoch
