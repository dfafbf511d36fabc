"""A real Apache Kafka node (KRaft, broker+controller) for development and tests.

One node alone is the single-node broker of ``processor kafka start``; ``cluster.LocalCluster``
runs several of them as one cluster (a static quorum of voters, see ``voters``).

The jars come from Maven Central through ``mvn`` instead of a release tarball: Maven is the
one reliable route to Central here, and its local repository (~/.m2) makes re-fetches free.
Everything the broker writes lives under ``data_dir``; the jars live under ``cache_dir``,
outside the repository, so several checkouts share one download.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from processor import maven
from processor.localkafka.brokertools import (
    BROKER_SUMS,
    FORMAT_TIMEOUT_S,
    HOST,
    KAFKA_VERSION,
    LOG4J2_XML,
    BrokerError,
    accepts,
    answers_metadata,
    default_data_dir,
    find_java,
    new_cluster_id,
    pom_xml,
    read_from,
    transactions_ready,
    wait_exit,
)

# Names other modules and tests import from here since before brokertools existed.
from processor.localkafka.brokertools import LOG4J_VERSION as LOG4J_VERSION
from processor.localkafka.brokertools import SCALA_VERSION as SCALA_VERSION
from processor.localkafka.brokertools import default_cache_dir as _default_cache_dir
from processor.localkafka.brokertools import find_java as _java
from processor.localkafka.brokertools import port_free_soon as _port_free_soon
from processor.processes import pid_alive

__all__ = [
    "HOST",
    "KAFKA_VERSION",
    "BrokerError",
    "LocalBroker",
    "_default_cache_dir",
    "_java",
    "_port_free_soon",
]


@dataclass
class LocalBroker:
    """One broker process, identified by its ``data_dir`` (which holds its pid file)."""

    port: int = 9092
    controller_port: int = 0
    # Factories rather than constants so the environment is read when a broker is made,
    # not when this module happens to be imported.
    data_dir: Path = field(default_factory=default_data_dir)
    cache_dir: Path = field(default_factory=_default_cache_dir)
    heap: str = "512m"
    # > 0: a second listener, SASL_PLAINTEXT with mechanism PLAIN, for ``sasl_users``
    # (user -> password). The broker itself keeps using the PLAINTEXT one.
    sasl_port: int = 0
    sasl_users: dict[str, str] = field(default_factory=dict)
    # True: Kafka's ACL authorizer (KRaft's StandardAuthorizer); without an ACL nothing is
    # allowed. The PLAINTEXT listeners' principal, User:ANONYMOUS (controller, inter-broker,
    # the readiness probe, whoever connects there), is a super user: only the SASL users are
    # held to ACLs. For tests of the ACLs a job needs (processor/kafka/acls.py), not for
    # anything reachable from elsewhere.
    acl_authorizer: bool = False
    # A node of a cluster (cluster.LocalCluster): its id, the static quorum of every node's
    # controller (``id@host:port,...``), the id its storage is formatted with, and broker
    # settings on top of the single-node ones. Empty voters: a quorum of this node alone.
    node_id: int = 1
    voters: str = ""
    cluster_id: str = ""
    overrides: dict[str, str] = field(default_factory=dict)
    # Where the node listens and what it advertises, and what its command runs under: a
    # partition test puts each node into a network namespace of its own (tests/netns.py:
    # its address, and ``ip netns exec <ns>``, which execs, so the pid stays Kafka's).
    # The defaults are the loopback broker everything else uses.
    host: str = HOST
    prefix: list[str] = field(default_factory=list)

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
        return f"{self.host}:{self.port}"

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
    def log4j_file(self) -> Path:
        return self.data_dir / "log4j2.xml"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def fetched(self) -> bool:
        """Whether the jars of this exact dependency set are already complete on disk."""
        return maven.fetched(self.kafka_home, pom_xml(), BROKER_SUMS)

    # ----------------------------------------------------------------- fetch

    def fetch(self) -> Path:
        """Download Kafka and a log4j2 binding into ``libs_dir``; returns that directory."""
        try:
            return maven.fetch(
                self.kafka_home,
                pom_xml(),
                f"Kafka {KAFKA_VERSION}",
                f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar",
                BROKER_SUMS,
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
        pid = self.running_pid()
        if pid is not None:
            # Possibly still starting (another caller launched it a moment ago): the
            # caller wants a usable broker, so wait for it rather than return early.
            self._wait_ready(pid, None, 0, time.monotonic() + timeout)
            return
        self.prepare()
        proc, log_offset = self.launch()
        self.wait_launched(proc, log_offset, time.monotonic() + timeout)

    def running_pid(self) -> int | None:
        """The pid of this node's running Kafka, or None; refuses one on another port."""
        pid = self._running_pid()
        if pid is not None:
            running_port = self.configured_port()
            if running_port is not None and running_port != self.port:
                raise BrokerError(
                    f"the broker of {self.data_dir} already runs on port {running_port} "
                    f"(pid {pid}); stop it before starting it on port {self.port}"
                )
        return pid

    def prepare(self) -> None:
        """Everything before the launch: free ports, jars, config files, formatted storage."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for port in (self.port, self.controller_port, self.sasl_port):
            if port and not _port_free_soon(port, host=self.host):
                raise BrokerError(
                    f"{self.host}:{port} is already in use by another process; "
                    "pick other ports with --port or stop whatever listens there"
                )
        java = find_java()
        self.log4j_file.write_text(LOG4J2_XML)
        self.properties_file.write_text(self._server_properties())
        classpath = str(self.fetch() / "*")
        if not (self.data_dir / "data" / "meta.properties").exists():
            self._format(java, classpath, self.log4j_file)

    def launch(self) -> tuple[subprocess.Popen[bytes], int]:
        """Start the prepared node without waiting: the nodes of a cluster must all run
        before any of them can become ready (a quorum needs a majority of its voters).
        Returns the process and where its output starts in the log, for ``wait_launched``."""
        cmd = [
            *self.prefix,
            find_java(),
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.log4j_file}",
            "-cp",
            str(self.libs_dir / "*"),
            "kafka.Kafka",
            str(self.properties_file),
        ]
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
        return proc, log_offset

    def wait_launched(
        self, proc: subprocess.Popen[bytes], log_offset: int, deadline: float
    ) -> None:
        """Return once the launched ``proc`` serves transactions; stop it if it never does."""
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

    def status_pid(self) -> int | None:
        """The pid of this node's running Kafka, or None, whatever port it runs on."""
        return self._running_pid()

    def status(self) -> str | None:
        pid = self._running_pid()
        if pid is None:
            return None
        return f"running pid {pid} on {self.host}:{self.configured_port() or self.port}"

    # ----------------------------------------------------------------- internals

    def _server_properties(self) -> str:
        host = self.host
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            # Dynamic quorum (bootstrap servers, not controller.quorum.voters) is what
            # `format --standalone` requires.
            "controller.quorum.bootstrap.servers": f"{host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self.port}",
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
        if self.voters:
            # A static quorum: every node knows all voters from its config, and each
            # storage is formatted alike (same cluster id, no --standalone).
            del settings["controller.quorum.bootstrap.servers"]
            settings["controller.quorum.voters"] = self.voters
        settings.update(self.overrides)
        if self.sasl_port:
            sasl = f"SASL_PLAINTEXT://{host}:{self.sasl_port}"
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
        if self.acl_authorizer:
            settings["authorizer.class.name"] = (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            )
            settings["super.users"] = "User:ANONYMOUS"
            settings["allow.everyone.if.no.acl.found"] = "false"
        lines = ["# Written by processor.localkafka.broker on every start; edits are overwritten."]
        lines += [f"{key}={value}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

    def _format(self, java: str, classpath: str, log4j_file: Path) -> None:
        cmd = [
            java,
            # A tool that runs for seconds: the quick JIT tier and the simplest GC start
            # fastest, which counts when a cluster formats all its nodes at once.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={log4j_file}",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id or new_cluster_id(),
            "-c",
            str(self.properties_file),
        ]
        if not self.voters:
            cmd.append("--standalone")
        done = subprocess.run(
            cmd,
            cwd=self.data_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=FORMAT_TIMEOUT_S,
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
                    f"{maven.tail(read_from(self.log_file, log_offset))}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stage = "a transactional producer" if metadata_ok else "a metadata request"
                raise BrokerError(
                    f"Kafka (pid {pid}) did not answer {stage} on {self.bootstrap} in time; "
                    f"see {self.log_file}"
                )
            step = max(0.5, min(remaining, 5.0))
            if not metadata_ok and not accepts(self.port, self.host):
                # librdkafka backs off between refused connects; a plain socket notices
                # the listener the moment it opens.
                time.sleep(0.1)
                continue
            if not metadata_ok:
                metadata_ok = answers_metadata(self.bootstrap, step)
                if not metadata_ok:
                    time.sleep(0.2)
                    continue
            if transactions_ready(self.bootstrap, step):
                return

    def _terminate(self, pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if wait_exit(pid, proc, timeout):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait_exit(pid, proc, 10.0):
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

    def configured_port(self) -> int | None:
        """The client port of the last start, from its properties file."""
        try:
            text = self.properties_file.read_text()
        except OSError:
            return None
        found = re.search(r"^listeners=.*PLAINTEXT://[^:,]+:(\d+)", text, re.MULTILINE)
        return int(found.group(1)) if found else None
