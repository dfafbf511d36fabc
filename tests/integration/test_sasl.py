"""The job against a SASL listener: every client kind (admin, producers, consumers, the
transactional ones) authenticates with what ``PROCESSOR_KAFKA_CONFIG`` gives it, and the output
stays exact. The listener really asks for credentials: without them or with a wrong password a
client gets nothing, and a service given a wrong password says so in one line and exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from processor.localkafka.broker import LocalBroker
from tests.integration.harness import JobRun
from tests.workers import worker_port

# A broker of its own, below the ephemeral port range like every test port (tests/conftest.py):
# PLAINTEXT 19392 (the broker itself and the test's own clients), controller 19393, SASL 19394.
PORT = worker_port(19392)
SASL_PORT = PORT + 2
USER, PASSWORD = "wordcount", "s3cret-for-the-test"


def _sasl(password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": USER,
        "sasl.password": password,
    }


def _list_topics(config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SASL_PORT}", **config})
    admin.list_topics(timeout=5)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    broker = LocalBroker(
        port=PORT,
        controller_port=PORT + 1,
        data_dir=tmp_path_factory.mktemp("sasl") / "kafka",
        sasl_port=SASL_PORT,
        sasl_users={USER: PASSWORD},
    )
    broker.start(timeout=120)
    yield broker
    broker.stop()


def test_word_count_over_sasl_plain(broker: LocalBroker, tmp_path: Path) -> None:
    _list_topics(_sasl(PASSWORD))
    with pytest.raises(KafkaException):
        _list_topics(_sasl("wrong"))
    with pytest.raises(KafkaException):
        _list_topics({})  # PLAINTEXT against the SASL listener

    run = JobRun(broker.bootstrap, tmp_path, interval_ms=500)
    # The job's processes reach the broker only through the SASL listener.
    run.env["PROCESSOR_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{SASL_PORT}"
    run.env["PROCESSOR_KAFKA_CONFIG"] = json.dumps(_sasl(PASSWORD))
    try:
        run.start(workers=2)
        run.feed(200_000, seconds=4)
        assert run.finish() > 0
        logs = run.log("coordinator") + run.log("worker-0") + run.log("worker-1")
        assert PASSWORD not in logs
    finally:
        run.stop()


# `local` runs a coordinator and a worker as child processes: it must stop and pass the
# exit code on, not restart them into the same refusal over and over.
@pytest.mark.parametrize("service", ["coordinator", "worker", "local"])
def test_wrong_password_is_a_one_line_error_not_a_wait(
    broker: LocalBroker, tmp_path: Path, service: str
) -> None:
    env = {
        **os.environ,
        "PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{SASL_PORT}",
        "PROCESSOR_KAFKA_CONFIG": json.dumps(_sasl("not-the-password")),
        "PROCESSOR_JOB_NAME": "wrong-password",
        "PROCESSOR_STATE_DIR": str(tmp_path / "state"),
        "PROCESSOR_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "PROCESSOR_METRICS_PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "processor", service, *(["--workers", "1"] * (service == "local"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    prefix = f"processor: Kafka at 127.0.0.1:{SASL_PORT} refused the credentials"
    # A service's error is its last line; `local` logs its own stop after the child's.
    error = lines[-1] if service != "local" else next((x for x in lines if prefix in x), "")
    assert error.startswith(prefix), done.stderr[-2000:]
    assert "Authentication failed" in error
    assert "not-the-password" not in done.stderr
