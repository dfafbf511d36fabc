"""A real single-node Apache Kafka broker (KRaft, broker+controller) for development and tests.

The jars come from Maven Central through ``mvn`` instead of a release tarball: Maven is the
one reliable route to Central here, and its local repository (~/.m2) makes re-fetches free.
Everything the broker writes lives under ``data_dir``; the jars live under ``cache_dir``,
outside the repository, so several checkouts share one download.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor import maven
from processor.processes import pid_alive

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
# kafka-server 4.4.0 declares log4j-core 2.25.5 and every Kafka module still declares
# slf4j-api 1.7.36, so the binding must be log4j-slf4j-impl (SLF4J 1.x). The newer
# log4j-slf4j2-impl only binds SLF4J 2.x and would leave the broker logging nothing.
LOG4J_VERSION = "2.25.5"
HOST = "127.0.0.1"

_FORMAT_TIMEOUT_S = 120.0


class BrokerError(Exception):
    """The local broker could not be fetched, started or stopped; the message is one line."""


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name, default)).expanduser()


def _default_data_dir() -> Path:
    return _env_path("PROCESSOR_KAFKA_DATA", "~/.local/share/processor/kafka")


def _default_cache_dir() -> Path:
    return _env_path("PROCESSOR_CACHE_DIR", "~/.cache/processor")


@dataclass
class LocalBroker:
    """One broker process, identified by its ``data_dir`` (which holds its pid file)."""

    port: int = 9092
    controller_port: int = 0
    # Factories rather than constants so the environment is read when a broker is made,
    # not when this module happens to be imported.
    data_dir: Path = field(default_factory=_default_data_dir)
    cache_dir: Path = field(default_factory=_default_cache_dir)
    heap: str = "512m"
    # > 0: a second listener, SASL_PLAINTEXT with mechanism PLAIN, for ``sasl_users``
    # (user -> password). The broker itself keeps using the PLAINTEXT one.
    sasl_port: int = 0
    sasl_users: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).expanduser().resolve()
        self.cache_dir = Path(self.cache_dir).expanduser().resolve()
        if self.controller_port == 0:
            self.controller_port = self.port + 1
        if self.controller_port == self.port:
            raise BrokerError(f"controller port {self.controller_port} equals the broker port")

    # ----------------------------------------------------------------- paths

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def kafka_home(self) -> Path:
        return self.cache_dir / f"kafka-{KAFKA_VERSION}"

    @property
    def libs_dir(self) -> Path:
        return self.kafka_home / "libs"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "kafka.pid"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def fetched(self) -> bool:
        """Whether the jars of this exact dependency set are already complete on disk."""
        return maven.fetched(self.kafka_home, _pom_xml())

    # ----------------------------------------------------------------- fetch

    def fetch(self) -> Path:
        """Download Kafka and a log4j2 binding into ``libs_dir``; returns that directory."""
        try:
            return maven.fetch(
                self.kafka_home,
                _pom_xml(),
                f"Kafka {KAFKA_VERSION}",
                f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar",
            )
        except maven.MavenError as exc:
            raise BrokerError(str(exc)) from exc

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 90) -> None:
        """Start the broker unless it already runs, and return once it serves transactions.

        ``timeout`` bounds the wait for the broker, not the one-time jar download.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Two starters of one data_dir (CLI and tests, parallel test workers) would both
        # see no broker and both launch one; the second must instead find the first.
        with maven.locked(self.data_dir / ".start.lock"):
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        pid = self._running_pid()
        if pid is not None:
            deadline = time.monotonic() + timeout
            running_port = self._configured_port()
            if running_port is not None and running_port != self.port:
                raise BrokerError(
                    f"the broker of {self.data_dir} already runs on port {running_port} "
                    f"(pid {pid}); stop it before starting it on port {self.port}"
                )
            # Possibly still starting (another caller launched it a moment ago): the
            # caller wants a usable broker, so wait for it rather than return early.
            self._wait_ready(pid, None, 0, deadline)
            return

        for port in (self.port, self.controller_port, self.sasl_port):
            if port and not _port_free_soon(port):
                raise BrokerError(
                    f"{HOST}:{port} is already in use by another process; "
                    "pick other ports with --port or stop whatever listens there"
                )
        libs = self.fetch()
        java = _java()
        log4j_file = self.data_dir / "log4j2.xml"
        log4j_file.write_text(_LOG4J2_XML)
        self.properties_file.write_text(self._server_properties())
        classpath = str(libs / "*")
        if not (self.data_dir / "data" / "meta.properties").exists():
            self._format(java, classpath, log4j_file)

        cmd = [
            java,
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j_file}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(self.properties_file),
        ]
        deadline = time.monotonic() + timeout
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting Kafka\n".encode())
            log.flush()
            log_offset = log.tell()
            # A session of its own so Ctrl-C in the launching terminal, or the test run
            # ending, does not take the broker down with it; stop() is the way to end it.
            proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        try:
            self._wait_ready(proc.pid, proc, log_offset, deadline)
        except BaseException:
            # A broker that never became ready is of no use and would hold the ports.
            self._terminate(proc.pid, proc, 10.0)
            self.pid_file.unlink(missing_ok=True)
            raise
        # Nothing here will wait() for the child: dropping the handle without a warning
        # keeps the broker running after this Python process exits.
        proc.returncode = 0

    def stop(self, timeout: float = 30) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout``); a no-op when not running."""
        pid = self._running_pid()
        if pid is not None:
            self._terminate(pid, None, timeout)
        self.pid_file.unlink(missing_ok=True)

    def status(self) -> str | None:
        pid = self._running_pid()
        if pid is None:
            return None
        return f"running pid {pid} on {HOST}:{self._configured_port() or self.port}"

    # ----------------------------------------------------------------- internals

    def _server_properties(self) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # Dynamic quorum (bootstrap servers, not controller.quorum.voters) is what
            # `format --standalone` requires.
            "controller.quorum.bootstrap.servers": f"{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "data"),
            # One node: every internal topic must fit on it, and fewer partitions make
            # the first group/transaction coordinator lookups (topic creation) faster.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created on purpose with the partition count the job needs.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
        }
        if self.sasl_port:
            sasl = f"SASL_PLAINTEXT://{HOST}:{self.sasl_port}"
            settings["listeners"] += f",{sasl}"
            settings["advertised.listeners"] += f",{sasl}"
            settings["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            settings["sasl.enabled.mechanisms"] = "PLAIN"
            users = " ".join(
                f'user_{user}="{password}"' for user, password in self.sasl_users.items()
            )
            settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            )
        lines = ["# Written by processor.kafka.broker on every start; edits are overwritten."]
        lines += [f"{key}={value}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

    def _format(self, java: str, classpath: str, log4j_file: Path) -> None:
        cmd = [
            java,
            f"-Dlog4j2.configurationFile={log4j_file}",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            _cluster_id(),
            "-c",
            str(self.properties_file),
            "--standalone",
        ]
        done = subprocess.run(
            cmd,
            cwd=self.data_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_FORMAT_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise BrokerError(
                f"formatting Kafka storage in {self.data_dir / 'data'} failed "
                f"(exit {done.returncode}): {maven.tail(done.stdout)}"
            )

    def _wait_ready(
        self, pid: int, proc: subprocess.Popen[bytes] | None, log_offset: int, deadline: float
    ) -> None:
        # Answering metadata is not enough for exactly-once work: the transaction
        # coordinator only comes up once __transaction_state exists and has a leader,
        # so readiness means a transactional producer got through init_transactions.
        metadata_ok = False
        while True:
            dead = proc.poll() is not None if proc is not None else not pid_alive(pid)
            if dead:
                code = f" with code {proc.returncode}" if proc is not None else ""
                raise BrokerError(
                    f"Kafka (pid {pid}) exited{code} while starting; see {self.log_file}: "
                    f"{maven.tail(_read_from(self.log_file, log_offset))}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stage = "a transactional producer" if metadata_ok else "a metadata request"
                raise BrokerError(
                    f"Kafka (pid {pid}) did not answer {stage} on {self.bootstrap} in time; "
                    f"see {self.log_file}"
                )
            step = max(0.5, min(remaining, 5.0))
            if not metadata_ok and not _accepts(self.port):
                # librdkafka backs off between refused connects; a plain socket notices
                # the listener the moment it opens.
                time.sleep(0.1)
                continue
            if not metadata_ok:
                metadata_ok = _answers_metadata(self.bootstrap, step)
                if not metadata_ok:
                    time.sleep(0.2)
                    continue
            if _transactions_ready(self.bootstrap, step):
                return

    def _terminate(self, pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_exit(pid, proc, timeout):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not _wait_exit(pid, proc, 10.0):
            raise BrokerError(f"Kafka (pid {pid}) survived SIGKILL")

    def _running_pid(self) -> int | None:
        """The pid in the pid file if that process is alive and is this data_dir's Kafka."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if not pid_alive(pid):
            return None
        # After a reboot or crash the pid may belong to an unrelated process by now.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if b"kafka.Kafka" not in cmdline or str(self.properties_file).encode() not in cmdline:
            return None
        return pid

    def _configured_port(self) -> int | None:
        try:
            text = self.properties_file.read_text()
        except OSError:
            return None
        found = re.search(r"^listeners=.*PLAINTEXT://[^:,]+:(\d+)", text, re.MULTILINE)
        return int(found.group(1)) if found else None


# --------------------------------------------------------------------- helpers


def _pom_xml() -> str:
    deps = [
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION),
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
        f"  <artifactId>kafka-{KAFKA_VERSION}-runtime</artifactId>\n"
        "  <version>1</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{body}\n  </dependencies>\n"
        "</project>\n"
    )


# Kafka's INFO level dumps every config and each partition change; WARN keeps kafka.log
# readable while the one INFO logger still records start and shutdown. Log4j's own
# shutdown hook would close the appender before Kafka's shutdown hook is done logging.
_LOG4J2_XML = """\
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
  </Loggers>
</Configuration>
"""


def _cluster_id() -> str:
    # Kafka's own Uuid.randomUuid() skips ids starting with "-": the CLI would read such
    # an id as a flag.
    while True:
        value = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java not found on PATH or in JAVA_HOME: Kafka needs Java 17 or newer")
    return java


def _wait_exit(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        gone = proc.poll() is not None if proc is not None else not pid_alive(pid)
        if gone:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _port_free_soon(port: int, grace: float = 5.0) -> bool:
    """Whether `port` is free now or within `grace` seconds.

    A client reconnecting to a stopped broker on a port in the ephemeral range can briefly
    hold that very port (a TCP self-connect), which it drops after the first failed request.
    """
    deadline = time.monotonic() + grace
    while not _port_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka binds with SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _answers_metadata(bootstrap: str, timeout: float) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def _transactions_ready(bootstrap: str, timeout: float) -> bool:
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


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------- CLI


def main(argv: list[str]) -> int:
    """``processor kafka start|stop|status``: manage the local development broker."""
    parser = argparse.ArgumentParser(
        prog="processor kafka",
        description=f"Run a local single-node Apache Kafka {KAFKA_VERSION} broker.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=9092, help="PLAINTEXT port on 127.0.0.1")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="broker state, config and kafka.log (default: $PROCESSOR_KAFKA_DATA or "
        "~/.local/share/processor/kafka)",
    )
    args = parser.parse_args(argv)
    if args.data_dir is None:
        broker = LocalBroker(port=args.port)
    else:
        broker = LocalBroker(port=args.port, data_dir=args.data_dir)

    try:
        if args.action == "start":
            if not broker.fetched:
                print(
                    f"fetching Kafka {KAFKA_VERSION} jars with Maven into {broker.libs_dir} "
                    "(first run only)...",
                    file=sys.stderr,
                    flush=True,
                )
            broker.start()
            print(
                f"kafka {KAFKA_VERSION} ready at {broker.bootstrap} "
                f"(pid {broker.pid_file.read_text().strip()}, log {broker.log_file})"
            )
            return 0
        if args.action == "stop":
            was = broker.status()
            broker.stop()
            print("kafka stopped" if was else "kafka was not running")
            return 0
        state = broker.status()
        print(f"kafka {state}" if state else f"kafka not running (data {broker.data_dir})")
        return 0 if state else 1
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
