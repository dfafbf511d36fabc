"""Shared fixtures: one real Kafka broker per test session, an admin client, fresh topics;
one real S3 API server per session (started on first use), a fresh prefix in its bucket;
one real PostgreSQL server per session (started on first use), a fresh database in it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

# The documented import path; the package's stubs just omit NewTopic from __all__.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg import conninfo, sql
from pydantic import SecretStr

from processor.config import S3Location
from processor.localkafka.broker import LocalBroker
from processor.state.s3 import S3Storage
from tests import postgres_server
from tests.s3server import S3Server
from tests.timing import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401
from tests.workers import longest_first, worker_port

# Away from the default 9092 so a developer's own broker (and its topics) stay untouched,
# and below Linux's ephemeral range (32768-60999): a client that keeps reconnecting to a
# port in that range while the broker is down can be given that very port as its source
# port and connect to itself (TCP simultaneous open), which then blocks the broker's bind.
# PROCESSOR_TEST_KAFKA_PORT moves it (and the controller, on the next port): two test
# sessions side by side on one machine.
# Under pytest-xdist every port here moves into the worker's own block (tests/workers.py).
TEST_PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_KAFKA_PORT", "19092")))
TEST_CONTROLLER_PORT = TEST_PORT + 1

# Below the ephemeral range too (see above); PROCESSOR_TEST_S3_PORT moves it (and the next
# port, which the outage test's own server takes).
TEST_S3_PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_S3_PORT", "18333")))
TEST_BUCKET = "processor-test"
TEST_REGION = "us-east-1"

# PostgreSQL on 15432 rather than 5432, away from a system cluster (and below the ephemeral
# range, see above). PROCESSOR_TEST_PG_DSN names a running server to use instead.
TEST_PG_PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_PG_PORT", "15432")))

NewTopicFactory = Callable[..., str]

# Fixtures that start a server (or need one): a test using any of them is marked `server`,
# and `deploy/test.sh --fast` leaves it out (`-m "not server and not integration"`).
SERVER_FIXTURES = frozenset(
    {"local_broker", "kafka_bootstrap", "admin", "new_topic", "s3_server", "postgres_dsn"}
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under pytest-xdist, captured output a worker can send to the controller.

    A worker sends each report over execnet, which takes only UTF-8-encodable strings: a
    test that logs a lone surrogate (test_poison's "\\ud800" error text) crashed the worker
    (INTERNALERROR, DumpError). Such characters are sent escaped; serial runs are untouched.
    """
    report = yield
    if os.environ.get("PYTEST_XDIST_WORKER"):
        report.sections = [(title, _sendable(text)) for title, text in report.sections]
        if isinstance(report.longrepr, str):
            report.longrepr = _sendable(report.longrepr)
    return report


def _sendable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The longest files first (tests/workers.py); one process keeps the collection order.
        items[:] = longest_first(items)
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session")
def local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker | None]:
    """The broker this session started, or None when PROCESSOR_TEST_BOOTSTRAP names one."""
    if os.environ.get("PROCESSOR_TEST_BOOTSTRAP"):
        yield None
        return
    broker = LocalBroker(
        port=TEST_PORT,
        controller_port=TEST_CONTROLLER_PORT,
        data_dir=tmp_path_factory.mktemp("kafka"),
    )
    broker.start(timeout=120)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(local_broker: LocalBroker | None) -> str:
    if local_broker is None:
        return os.environ["PROCESSOR_TEST_BOOTSTRAP"]
    return local_broker.bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[NewTopicFactory]:
    """``new_topic(partitions=1, config=None) -> name``: a topic no other test has touched."""
    created: list[str] = []
    # The test's name in the topic makes a leftover topic on a shared broker traceable.
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:150]

    def create(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"test.{stem}.{uuid.uuid4().hex[:10]}"
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)
        created.append(name)
        _wait_for_topic(admin, name, partitions)
        return name

    yield create

    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            # Cleanup is a courtesy to a shared broker; a failure must not fail the test.
            with contextlib.suppress(Exception):
                future.result(timeout=30)


def _wait_for_topic(admin: AdminClient, name: str, partitions: int, timeout: float = 30) -> None:
    # CreateTopics returns once the controller has the topic; clients producing right away
    # need the broker's metadata to show every partition with a leader.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} did not appear with {partitions} partitions in {timeout}s")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 API server for the session, with the bucket TEST_BUCKET in it."""
    server = S3Server(port=TEST_S3_PORT, data_dir=tmp_path_factory.mktemp("s3"))
    server.start(timeout=120)
    try:
        create_bucket(server, TEST_BUCKET)
        yield server
    finally:
        server.stop()


def create_bucket(server: S3Server, bucket: str) -> None:
    # Through the storage's own client: its settings are the ones S3Proxy accepts.
    s3_storage_for(server, S3Location(bucket))._s3.create_bucket(Bucket=bucket)


def s3_storage_for(server: S3Server, location: S3Location, **options: Any) -> S3Storage:
    return S3Storage(
        location,
        endpoint_url=server.endpoint_url,
        region=TEST_REGION,
        access_key_id=SecretStr(server.access_key_id),
        secret_access_key=SecretStr(server.secret_access_key),
        **options,
    )


@pytest.fixture
def s3_location(s3_server: S3Server) -> S3Location:
    """A prefix in the test bucket that no other test uses."""
    return S3Location(TEST_BUCKET, f"tests/{uuid.uuid4().hex[:12]}")


@pytest.fixture
def s3_storage(s3_server: S3Server, s3_location: S3Location) -> S3Storage:
    return s3_storage_for(s3_server, s3_location)


@pytest.fixture(scope="session")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The DSN of a real PostgreSQL server, as a superuser, database ``postgres``.

    PROCESSOR_TEST_PG_DSN when set; otherwise a server this session starts on TEST_PG_PORT
    (tests/postgres_server.py) and stops at its end. Without PostgreSQL on the machine
    the tests that need it are skipped, except under CI, where that is a failure: CI must
    not pass by running none of them.
    """
    if external := os.environ.get("PROCESSOR_TEST_PG_DSN"):
        yield external
        return
    if postgres_server.find_bindir() is None:
        message = (
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres, no "
            "pg_config --bindir): apt-get install postgresql, or set PROCESSOR_TEST_PG_DSN"
        )
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(message)
        pytest.skip(message)
    with postgres_base(tmp_path_factory) as base:
        data_dir = base / "data"
        dsn = postgres_server.start(data_dir, TEST_PG_PORT)
        try:
            yield dsn
        finally:
            postgres_server.stop(data_dir)


@contextlib.contextmanager
def postgres_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # As root the server runs as the 'postgres' user, who cannot enter pytest's temp area
    # (mode 0700, root's): a directory of its own under /tmp then, removed afterwards.
    if os.geteuid() != 0:
        yield tmp_path_factory.mktemp("postgres")
        return
    base = Path(tempfile.mkdtemp(prefix="processor-test-pg-"))
    try:
        base.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_database(postgres_dsn: str) -> Iterator[str]:
    """A fresh, empty database for one test: its DSN (libpq key=value form), for any driver.

    Dropped afterwards, with whatever the test left: open sessions, and prepared (two-phase)
    transactions, which would otherwise outlive the test and block the drop.
    """
    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin_conn:
        admin_conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = conninfo.make_conninfo(postgres_dsn, dbname=name)
    try:
        yield dsn
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin_conn:
            gids = admin_conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = %s", (name,)
            ).fetchall()
            if gids:
                # ROLLBACK PREPARED works only from a session in the transaction's database.
                with psycopg.connect(dsn, autocommit=True) as conn:
                    for (gid,) in gids:
                        conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            admin_conn.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )
