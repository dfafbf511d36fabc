"""The commands users run, as subprocesses: demo, local (Ctrl-C), invalid settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from processor.kafka import clients
from tests.integration.harness import wait_until


def _processor(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _job_with_input(bootstrap: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The settings of a fresh job whose input holds 100 lines of "to be or not to be"."""
    job = f"cli-{uuid.uuid4().hex[:6]}"
    env = {
        "PROCESSOR_BOOTSTRAP_SERVERS": bootstrap,
        "PROCESSOR_JOB_NAME": job,
        "PROCESSOR_INPUT_TOPIC": f"{job}.input",
        "PROCESSOR_OUTPUT_TOPIC": f"{job}.counts",
        "PROCESSOR_STATE_DIR": str(tmp_path / "state"),
        "PROCESSOR_CHECKPOINT_DIR": str(tmp_path / "chk"),
        **extra,
    }
    corpus = tmp_path / "in.txt"
    corpus.write_text("to be or not to be\n" * 100)
    assert _processor("produce", "--topic", f"{job}.input", str(corpus), env=env).returncode == 0
    return env


def test_demo_runs_end_to_end_and_checks_every_count(kafka_bootstrap: str, tmp_path: Path) -> None:
    result = _processor(
        "demo",
        "--words",
        "100000",
        "--workers",
        "2",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--state-dir",
        str(tmp_path / "state"),
        "--checkpoint-dir",
        str(tmp_path / "chk"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "match a direct count exactly" in result.stdout
    assert "top 15 words" in result.stdout


def test_local_stops_every_child_on_ctrl_c(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = _job_with_input(kafka_bootstrap, tmp_path)
    log = (tmp_path / "local.log").open("w")
    local = subprocess.Popen(
        [sys.executable, "-m", "processor", "local", "--workers", "2"],
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # The words reach the output in the second epoch: wait for three checkpoints.
        wait_until(
            lambda: (tmp_path / "local.log").read_text().count(" complete in ") >= 3,
            60,
            "three checkpoints",
        )
        local.send_signal(signal.SIGINT)  # what Ctrl-C sends
        assert local.wait(60) == 0
        time.sleep(0.5)
        # Every child process of the group has exited too.
        alive = subprocess.run(["pgrep", "-g", str(local.pid)], capture_output=True, text=True)
        assert alive.stdout.strip() == "", f"children left running: {alive.stdout}"
        counts = _processor("counts", "--top", "3", env=env)
        assert counts.returncode == 0
        assert counts.stdout.splitlines()[:2] == ["         200  be", "         200  to"]
    finally:
        if local.poll() is None:
            os.killpg(local.pid, signal.SIGKILL)


def test_local_restarts_a_killed_coordinator_and_the_job_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = _job_with_input(kafka_bootstrap, tmp_path, PROCESSOR_CHECKPOINT_INTERVAL_MS="300")
    log_path = tmp_path / "local.log"
    local = subprocess.Popen(
        [sys.executable, "-m", "processor", "local", "--workers", "2"],
        env={**os.environ, **env},
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: log_path.read_text().count(" complete in ") >= 2, 60, "checkpoints")
        coordinator = _child_pid(local.pid, "coordinator")
        os.kill(coordinator, signal.SIGKILL)
        wait_until(
            lambda: "coordinator exited with -9: starting it again" in log_path.read_text(),
            30,
            "the restart line",
        )
        # The new coordinator goes on checkpointing, and the workers were never stopped.
        done = log_path.read_text().count(" complete in ")
        wait_until(
            lambda: log_path.read_text().count(" complete in ") >= done + 3,
            60,
            "checkpoints after the coordinator's restart",
        )
        assert local.poll() is None, log_path.read_text()[-2000:]
        assert _child_pid(local.pid, "coordinator") != coordinator
        counts = _processor("counts", "--top", "2", env=env)
        assert counts.stdout.splitlines()[:2] == ["         200  be", "         200  to"]
        local.send_signal(signal.SIGINT)
        assert local.wait(60) == 0
    finally:
        if local.poll() is None:
            os.killpg(local.pid, signal.SIGKILL)


def _child_pid(parent: int, command: str) -> int:
    """The pid of ``processor <command>`` among ``parent``'s children."""
    found = subprocess.run(
        ["pgrep", "-P", str(parent), "-f", f"processor {command}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(found) == 1, f"expected one {command} child, found {found}"
    return int(found[0])


def test_invalid_setting_is_one_line_naming_it_with_exit_code_2() -> None:
    result = _processor("worker", "--checkpoint-interval-ms", "5")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--checkpoint-interval-ms" in lines[0], result.stderr

    result = _processor("worker", env={"PROCESSOR_SHUFFLE_PARTITIONS": "zero"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        line
        for line in result.stderr.strip().splitlines()
        if "PROCESSOR_SHUFFLE_PARTITIONS" in line
    ]


def test_missing_input_topic_is_one_line_with_exit_code_2(kafka_bootstrap: str) -> None:
    result = _processor(
        "coordinator",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--input-topic",
        "no-such-topic",
        "--job-name",
        f"cli-{uuid.uuid4().hex[:6]}",
        timeout=60,
    )
    assert result.returncode == 2
    assert "input topic 'no-such-topic' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_produce_once_writes_a_topic_only_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"once-{uuid.uuid4().hex[:6]}"
    env = {"PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap}
    corpus = tmp_path / "in.txt"
    corpus.write_text("to be or not to be\n" * 100)
    first = _processor("produce", "--once", "--topic", topic, str(corpus), env=env)
    assert first.returncode == 0, first.stderr
    assert "produced 100 lines" in first.stdout
    again = _processor("produce", "--once", "--topic", topic, str(corpus), env=env)
    assert again.returncode == 0, again.stderr
    assert f"{topic} already has records: nothing produced" in again.stdout
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        written = sum(
            clients.watermark_offsets(consumer, TopicPartition(topic, p))[1] for p in partitions
        )
    finally:
        consumer.close()
    assert written == 100


def test_a_pipeline_that_cannot_run_is_one_line_with_exit_code_2(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    no_sink = tmp_path / "no_sink.py"
    no_sink.write_text(
        "from processor import Pipeline\npipeline = Pipeline()\npipeline.source('t').map(str)\n"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    twice = tmp_path / "twice.py"
    twice.write_text(
        "from processor import Pipeline\npipeline = Pipeline()\n"
        "pipeline.source('t', name='a').sink('o1')\npipeline.source('t', name='b').sink('o2')\n"
    )
    cases = [
        (["local", "--pipeline", str(tmp_path / "missing.py")], "does not exist"),
        (["local", "--pipeline", f"{broken}:pipeline"], "does not import: ModuleNotFoundError"),
        (["worker", "--pipeline", f"{no_sink}:pipeline"], "has no sink"),
        (["coordinator", "--pipeline", f"{no_sink}:other"], "has no attribute 'other'"),
        (["local", "--pipeline", f"{twice}:pipeline"], "source('t') is read twice"),
        (["coordinator", "--pipeline", f"{twice}:pipeline"], "s = p.source('t'); s.map(...)"),
    ]
    for args, problem in cases:
        result = _processor(*args, "--bootstrap-servers", kafka_bootstrap, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and problem in lines[0], (args, result.stderr)


def test_a_missing_source_topic_of_a_pipeline_is_one_line_with_exit_code_2(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    path = tmp_path / "p.py"
    path.write_text(
        "from processor import Pipeline\n"
        "pipeline = Pipeline()\n"
        "pipeline.source('no-such-source').key_by(str).count().sink('out')\n"
    )
    result = _processor(
        "coordinator",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--pipeline",
        f"{path}:pipeline",
        "--job-name",
        f"cli-{uuid.uuid4().hex[:6]}",
        timeout=60,
    )
    assert result.returncode == 2
    assert "source topic 'no-such-source' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_counts_on_a_sink_of_objects_is_one_line_naming_tail(kafka_bootstrap: str) -> None:
    """`processor counts` is word count's reader: on any other sink it says so in one line
    and names the command that reads any sink, instead of a traceback."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"objects-{uuid.uuid4().hex[:6]}"
    env = {"PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap}
    missing = _processor("counts", "--topic", topic, env=env)
    assert missing.returncode == 2 and f"topic {topic!r} does not exist" in missing.stderr
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b'{"total": 3}', key=b"user-1")
    assert producer.flush(30) == 0
    got = _processor("counts", "--topic", topic, env=env)
    assert got.returncode == 2
    assert "Traceback" not in got.stderr and len(got.stderr.strip().splitlines()) == 1
    assert f"processor tail {topic} --latest" in got.stderr
