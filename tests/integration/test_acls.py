"""The job under Kafka's ACL authorizer, the coordinator and the workers each logged in as a
principal of its own, granted exactly what ``processor/kafka/acls.py`` lists for it: the word
count (a shuffle, a keyed count, the DLQ, purges) runs to exact output, and the broker logs
no denial (so no rule is missing, even one the clients would shrug off); so do a pipeline
with a loop (feedback topics) and a job started from a savepoint. The workers'
principal, which user code runs as, is refused writing ``<job>.checkpoints``, taking the
coordinator's transactional id (its lease) and creating topics. Without the transactional-id
rules, or the sink's, the coordinator exits 2 in one line and nothing is written. (Also seen
to fail a test here when left out or narrowed: the workers' Delete on a shuffle, the
coordinator's Describe beside Create, its Read on the source and on the group.)"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.config import load_settings
from processor.jobs import load_graph
from processor.kafka import acls
from processor.localkafka.broker import LocalBroker
from tests.conftest import TEST_PORT
from tests.integration.harness import JobRun, SuccessorRun, wait_until
from tests.integration.pipeline_run import PipelineRun
from tests.integration.test_loop_jobs import EXAMPLE as COMPONENTS
from tests.integration.test_loop_jobs import committed_components
from tests.loopcheck import check_components, random_edges

# A broker of its own, below the ephemeral port range like every test port (tests/conftest.py),
# 1,100 above the session's (PROCESSOR_TEST_KAFKA_PORT moves both): PLAINTEXT 20192 (the
# broker, and the test's clients: a super user), controller 20193, SASL 20194 (the job's
# principals, held to their ACLs).
PORT = TEST_PORT + 1100
SASL_PORT = PORT + 2
COORDINATOR: acls.Role = "coordinator"
WORKER: acls.Role = "worker"
PASSWORDS: dict[str, str] = {COORDINATOR: "acl-test-coordinator", WORKER: "acl-test-worker"}
PRINCIPALS = {COORDINATOR: f"User:{COORDINATOR}", WORKER: f"User:{WORKER}"}
NOT_UTF8 = b"\xff\xfe not utf8"  # a dead record: the word count writes it to <job>.dlq


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    broker = LocalBroker(
        port=PORT,
        controller_port=PORT + 1,
        data_dir=tmp_path_factory.mktemp("acls") / "kafka",
        sasl_port=SASL_PORT,
        sasl_users=PASSWORDS,
        acl_authorizer=True,
    )
    broker.start(timeout=120)
    yield broker
    broker.stop()


def _login(role: acls.Role) -> dict[str, Any]:
    """The Kafka settings of ``role``'s principal, through the SASL listener."""
    return {
        "bootstrap.servers": f"127.0.0.1:{SASL_PORT}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": role,
        "sasl.password": PASSWORDS[role],
    }


def _kafka_config(role: acls.Role) -> str:
    login = _login(role)
    del login["bootstrap.servers"]
    return json.dumps(login)


def _job(broker: LocalBroker, workdir: Path) -> tuple[JobRun, list[acls.AclRule]]:
    """A word count whose source and sink are outside ``<job>.`` (so their literal rules
    count), run through the SASL listener, the coordinator logged in as its principal and the
    workers as theirs; and the rules the principals need."""
    name = uuid.uuid4().hex[:8]
    source, sink = f"acl-words-{name}", f"acl-counts-{name}"
    run = JobRun(broker.bootstrap, workdir, input_partitions=2, input_topic=source)
    return run, _through_sasl(run, source, sink)


def _through_sasl(run: JobRun, source: str, sink: str) -> list[acls.AclRule]:
    """``run`` set to read ``source`` into ``sink`` through the SASL listener, the coordinator
    logged in as its principal and the workers as theirs; the rules `processor acls` lists."""
    run.settings = load_settings(
        bootstrap_servers=run.settings.bootstrap_servers,
        job_name=run.job,
        input_topic=source,
        output_topic=sink,
    )
    run.env.update(
        {
            "PROCESSOR_OUTPUT_TOPIC": sink,
            "PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{SASL_PORT}",
            "PROCESSOR_KAFKA_CONFIG": _kafka_config(COORDINATOR),
            "PROCESSOR_SHUFFLE_PARTITIONS": "2",
            "PROCESSOR_SHUFFLE_PURGE_INTERVAL_MS": "200",
        }
    )
    run.worker_env = {"PROCESSOR_KAFKA_CONFIG": _kafka_config(WORKER)}
    # What `processor acls` prints for this job: the same settings, the same graph.
    settings = load_settings(
        job_name=run.job, input_topic=source, output_topic=sink, shuffle_purge_interval_ms=200
    )
    return acls.graph_acls(settings, load_graph(settings))


def _grant(broker: LocalBroker, rules: list[acls.AclRule]) -> None:
    """Each role's rules to its principal."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # PLAINTEXT: a super user
    granted = [
        b for role in acls.ROLES for b in acls.bindings(acls.of(rules, role), PRINCIPALS[role])
    ]
    for future in admin.create_acls(granted).values():
        future.result(30)


def _records(broker: LocalBroker, topic: str) -> list[bytes]:
    """Every committed record of ``topic`` (one partition is enough for the DLQ)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"acl-test-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        if high == 0:
            return []
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        while consumer.position([tp])[0].offset < high:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None and msg.value():
                    values.append(msg.value())  # type: ignore[arg-type]
        return values
    finally:
        consumer.close()


def _log_start(broker: LocalBroker, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "acl-test"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[0]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _broker_log(broker: LocalBroker) -> list[str]:
    return broker.log_file.read_text(errors="replace").splitlines()


def _logs(run: JobRun) -> str:
    return run.log("coordinator") + run.log("worker-0") + run.log("worker-1")


def test_the_listed_acls_are_enough(broker: LocalBroker, tmp_path: Path) -> None:
    run, rules = _job(broker, tmp_path)
    _grant(broker, rules)
    try:
        run.start(workers=2)
        run.produce([NOT_UTF8])
        run.feed(100_000, seconds=3)
        assert run.finish() > 0
        assert _records(broker, run.settings.dlq_topic) == [NOT_UTF8]
        # Purges (DeleteRecords) went through: the shuffle's log start moved.
        shuffle = f"{run.job}.shuffle"
        wait_until(lambda: any(_log_start(broker, shuffle, 2)), 10, f"a purge of {shuffle}")
        logs = _logs(run)
        assert "could not purge" not in logs
        assert "AUTHORIZATION" not in logs.upper(), logs[-3000:]
        # Nor a denial the clients took in their stride: the broker logs every one.
        denied = [
            x for x in _broker_log(broker) for p in PRINCIPALS.values() if f"{p} is Denied" in x
        ]
        assert not denied, denied[:5]
    finally:
        run.stop()


# Each rule left out once where the coordinator meets it: its transactional id (the lease),
# the sink it creates. It exits 2 with one line pointing at `processor acls`, nothing written.
@pytest.mark.parametrize(
    ("left_out", "error"),
    [
        ("transactional-id", "Transactional Id authorization failed"),
        ("sink", "Topic authorization failed"),
    ],
)
def test_without_a_listed_acl_the_job_says_so_and_writes_nothing(
    broker: LocalBroker, tmp_path: Path, left_out: str, error: str
) -> None:
    run, rules = _job(broker, tmp_path)
    sink = run.settings.output_topic
    _grant(
        broker, [r for r in rules if left_out not in (r.resource, "sink" if r.name == sink else "")]
    )
    try:
        run.start(workers=1)
        run.produce([b"alpha beta gamma"])
        assert run.coordinator is not None
        assert run.coordinator.wait(60) == 2, run.log("coordinator")[-3000:]
        last = run.log("coordinator").strip().splitlines()[-1]
        assert last.startswith(f"processor: Kafka at 127.0.0.1:{SASL_PORT} denied"), last
        assert error in last and "processor acls --coordinator-principal" in last, last
        if left_out != "sink":
            assert _records(broker, sink) == []
    finally:
        run.stop()


def _produce(config: dict[str, Any], topic: str) -> KafkaError | None:
    """The error of one record produced to ``topic`` (None: written)."""
    errors: list[KafkaError | None] = []

    def delivered(err: KafkaError | None, _: Message) -> None:
        errors.append(err)

    producer = Producer({**config, "message.timeout.ms": 10_000})
    producer.produce(topic, b'{"id": 1}', on_delivery=delivered)
    producer.flush(20)
    assert errors, f"no delivery report for {topic}"
    return errors[0]


def _init_transactions(config: dict[str, Any], transactional_id: str) -> KafkaError | None:
    producer = Producer({**config, "transactional.id": transactional_id})
    try:
        producer.init_transactions(20)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def test_a_workers_principal_cannot_write_checkpoints_nor_take_the_lease(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """What a worker's user code can do with the workers' login: its own topics and ids, not
    the coordinator's. (The coordinator's login, granted its own rules, is refused nothing of
    this: the refusals are the ACLs', not a wrong password.)"""
    run, rules = _job(broker, tmp_path)
    _grant(broker, rules)
    job = run.job
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    internal = [f"{job}.checkpoints", f"{job}.control"]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in internal]).values():
        future.result(30)
    worker, coordinator = _login(WORKER), _login(COORDINATOR)

    error = _produce(worker, f"{job}.checkpoints")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    error = _init_transactions(worker, f"{job}.coordinator")
    assert error is not None, "the workers' principal took the coordinator's lease id"
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    worker_admin = AdminClient(worker)
    refused = worker_admin.create_topics([NewTopic(f"{job}.mine", 1, 1)])
    with pytest.raises(KafkaException) as created:
        refused[f"{job}.mine"].result(30)
    assert created.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _records(broker, f"{job}.checkpoints") == []

    # What it does need goes through: heartbeats on .control, its tasks' ids.
    assert _produce(worker, f"{job}.control") is None
    assert _init_transactions(worker, f"{job}.split-0") is None
    # And the coordinator's own login may do what the worker's may not.
    assert _produce(coordinator, f"{job}.checkpoints") is None
    assert _init_transactions(coordinator, f"{job}.coordinator") is None


def test_a_savepoint_is_taken_and_applied_with_the_listed_acls(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """The coordinator's rules cover `processor savepoint` (run with its login) and a first
    start from the savepoint, which commits the savepoint's positions as the group's."""
    first, rules = _job(broker, tmp_path / "first")
    _grant(broker, rules)
    second: JobRun | None = None
    try:
        first.produce([b"alpha beta", b"beta gamma"] * 500)
        first.start(workers=1)
        first.wait_idle(180)
        first.start_coordinator(exit_when_idle=False)
        name = f"sp-{first.job}"
        taken = subprocess.run(
            [sys.executable, "-m", "processor", "savepoint", "--name", name],
            env=first.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert taken.returncode == 0, taken.stderr[-3000:]
        first.stop()

        second = SuccessorRun(first, tmp_path / "second", input_topic=first.settings.input_topic)
        _grant(
            broker,
            _through_sasl(second, first.settings.input_topic, first.settings.output_topic),
        )
        second.env["PROCESSOR_FROM_SAVEPOINT"] = name
        second.produce([b"gamma delta"] * 300)
        second.start(workers=1)
        assert second.finish(240) > 0
        assert f"starts from savepoint {name}" in second.log("coordinator")
        # Denials of this test's resources (the module's other tests leave rules out).
        names = [first.job, second.job, first.settings.input_topic, first.settings.output_topic]
        denied = [
            x
            for x in _broker_log(broker)
            for p in PRINCIPALS.values()
            if f"{p} is Denied" in x and any(n in x for n in names)
        ]
        assert not denied, denied[:5]
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_loop_runs_exactly_once_with_the_listed_acls(broker: LocalBroker, tmp_path: Path) -> None:
    """A pipeline with a loop (examples/components.py): a feedback topic, written, read and
    purged by the workers and created by the coordinator, under each principal's rules."""
    run = PipelineRun(
        broker.bootstrap,
        tmp_path,
        COMPONENTS,
        {"edges": "edges", "components": "components"},
        shuffle_partitions="2",
        shuffle_purge_interval_ms="200",
    )
    run.env.update(
        {
            "PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{SASL_PORT}",
            "PROCESSOR_KAFKA_CONFIG": _kafka_config(COORDINATOR),
        }
    )
    run.worker_env = {"PROCESSOR_KAFKA_CONFIG": _kafka_config(WORKER)}
    settings = load_settings(
        job_name=run.job, pipeline=run.env["PROCESSOR_PIPELINE"], shuffle_purge_interval_ms=200
    )
    graph = load_graph(settings)
    assert graph.plan.loops, "a pipeline with a loop"
    _grant(broker, acls.graph_acls(settings, graph))
    data = random_edges(300, 600, seed=5)
    try:
        run.start(workers=2)
        run.feed_topic("edges", [json.dumps(e).encode() for e in data], seconds=2)
        run.resume_feed()
        run.drain(timeout=300)
        records = committed_components(broker.bootstrap, run.topics["components"])
        assert check_components(records, data) > 0
        denied = [
            x
            for x in _broker_log(broker)
            for p in PRINCIPALS.values()
            if f"{p} is Denied" in x and run.job in x
        ]
        assert not denied, denied[:5]
    finally:
        run.stop()
