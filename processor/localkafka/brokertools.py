"""What a local Kafka node needs besides its own lifecycle: versions, jar set, Java, ports,
readiness probes. Shared by ``broker`` (one node) and ``cluster`` (several)."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor.processes import pid_alive

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
# kafka-server 4.4.0 declares log4j-core 2.25.5 and every Kafka module still declares
# slf4j-api 1.7.36, so the binding must be log4j-slf4j-impl (SLF4J 1.x). The newer
# log4j-slf4j2-impl only binds SLF4J 2.x and would leave the broker logging nothing.
LOG4J_VERSION = "2.25.5"
HOST = "127.0.0.1"
# The SHA-256 of every jar Maven fetches, per set (processor/maven.py): package data, so an
# installed processor checks its downloads as a checkout does. Regenerated on a version bump.
CHECKSUMS = Path(__file__).resolve().parent / "checksums"
BROKER_SUMS = CHECKSUMS / f"kafka-{KAFKA_VERSION}.sha256"
TOOLS_SUMS = CHECKSUMS / f"kafka-tools-{KAFKA_VERSION}.sha256"

FORMAT_TIMEOUT_S = 120.0


class BrokerError(Exception):
    """The local broker could not be fetched, started or stopped; the message is one line."""


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name, default)).expanduser()


def default_data_dir() -> Path:
    return _env_path("PROCESSOR_KAFKA_DATA", "~/.local/share/processor/kafka")


def default_cache_dir() -> Path:
    return _env_path("PROCESSOR_CACHE_DIR", "~/.cache/processor")


def pom_xml(
    artifact: tuple[str, str] = ("org.apache.kafka", f"kafka_{SCALA_VERSION}"),
    name: str = f"kafka-{KAFKA_VERSION}-runtime",
) -> str:
    """A pom whose runtime dependencies are Kafka's ``artifact`` (the broker by default) at
    ``KAFKA_VERSION`` and the log4j2 binding its logging needs."""
    deps = [
        (*artifact, KAFKA_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
        ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ]
    body = "\n".join(
        "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
        "<version>{}</version></dependency>".format(*dep)
        for dep in deps
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>local.processor</groupId>\n"
        f"  <artifactId>{name}</artifactId>\n"
        "  <version>1</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{body}\n  </dependencies>\n"
        "</project>\n"
    )


# Kafka's INFO level dumps every config and each partition change; WARN keeps kafka.log
# readable while the one INFO logger still records start and shutdown, and the authorizer's
# records each request it denies (with an ACL authorizer, see LocalBroker). Log4j's own
# shutdown hook would close the appender before Kafka's shutdown hook is done logging.
LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.authorizer.logger" level="INFO"/>
  </Loggers>
</Configuration>
"""


def new_cluster_id() -> str:
    # Kafka's own Uuid.randomUuid() skips ids starting with "-": the CLI would read such
    # an id as a flag.
    while True:
        value = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java not found on PATH or in JAVA_HOME: Kafka needs Java 17 or newer")
    return java


def wait_exit(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        gone = proc.poll() is not None if proc is not None else not pid_alive(pid)
        if gone:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def port_free_soon(port: int, grace: float = 5.0, host: str = HOST) -> bool:
    """Whether `port` is free now or within `grace` seconds.

    A client reconnecting to a stopped broker on a port in the ephemeral range can briefly
    hold that very port (a TCP self-connect), which it drops after the first failed request.
    """
    deadline = time.monotonic() + grace
    while not port_free(port, host):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def port_free(port: int, host: str = HOST) -> bool:
    if host != HOST:
        # An address of another network namespace (a partition test's host): this process
        # cannot bind it, but it can reach it, and a listener there answers a connect.
        return not accepts(port, host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka binds with SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def accepts(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def answers_metadata(bootstrap: str, timeout: float) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def transactions_ready(bootstrap: str, timeout: float) -> bool:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "processor-local-broker-readiness",
            "log_level": 0,
        }
    )
    try:
        producer.init_transactions(timeout)
    except KafkaException:
        return False
    finally:
        producer.flush(0)
    return True


def read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------- CLI


def replication_gaps(bootstrap: str, nodes: int, timeout: float) -> str | None:
    """None once ``nodes`` brokers are in the metadata and every partition has a leader and
    all its replicas in sync; otherwise what is still missing, in a few words."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        return f"no metadata ({exc.args[0]})"
    if len(metadata.brokers) < nodes:
        return f"{len(metadata.brokers)} of {nodes} brokers registered"
    behind = [
        f"{topic.topic}-{partition.id}"
        for topic in metadata.topics.values()
        for partition in topic.partitions.values()
        if partition.leader < 0 or set(partition.isrs) != set(partition.replicas)
    ]
    if behind:
        return f"{len(behind)} partitions not fully in sync (e.g. {', '.join(behind[:3])})"
    return None
