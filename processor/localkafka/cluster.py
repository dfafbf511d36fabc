"""A local Kafka cluster of one or more KRaft nodes, and ``processor kafka start|stop|status``.

Every node is a combined broker+controller (``broker.LocalBroker``); three of them form a
3-voter quorum, so a controller can be killed like any broker. Ports, from ``--port P``:

- one node: client listener P, controller P+1 (the single-broker layout, unchanged);
- N nodes: client listeners P .. P+N-1, controllers P+100 .. P+100+N-1 (``CONTROLLER_OFFSET``
  keeps them clear of the client block and of a single broker on a neighbouring port).

A single node lives in the data dir itself; the nodes of a cluster in ``node-1``, ``node-2``
... under it, next to ``cluster.json`` (node count and cluster id).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from processor import maven
from processor.kafka.replication import min_insync
from processor.localkafka.broker import LocalBroker
from processor.localkafka.brokertools import (
    HOST,
    KAFKA_VERSION,
    BrokerError,
    default_cache_dir,
    default_data_dir,
    new_cluster_id,
    replication_gaps,
    wait_exit,
)

CONTROLLER_OFFSET = 100
MAX_NODES = 9  # the controller block must stay below P + CONTROLLER_OFFSET + 100


@dataclass(frozen=True)
class PortLayout:
    """The client (broker) and controller port of each node, node 1 first."""

    brokers: tuple[int, ...]
    controllers: tuple[int, ...]


def port_layout(port: int, nodes: int) -> PortLayout:
    """Where ``nodes`` nodes listen when the first client listener is ``port``.

    >>> port_layout(9092, 1)
    PortLayout(brokers=(9092,), controllers=(9093,))
    >>> port_layout(9092, 3)
    PortLayout(brokers=(9092, 9093, 9094), controllers=(9192, 9193, 9194))
    """
    if not 1 <= nodes <= MAX_NODES:
        raise BrokerError(f"a local cluster has 1 to {MAX_NODES} brokers, not {nodes}")
    if nodes == 1:
        layout = PortLayout((port,), (port + 1,))
    else:
        layout = PortLayout(
            tuple(port + i for i in range(nodes)),
            tuple(port + CONTROLLER_OFFSET + i for i in range(nodes)),
        )
    if port < 1 or max(layout.controllers) > 65535:
        raise BrokerError(f"--port {port} leaves no room for the ports of {nodes} brokers")
    return layout


def cluster_properties(nodes: int) -> dict[str, str]:
    """Broker settings of every node of an ``nodes``-node cluster, on top of the single-node ones.

    Taken from Kafka's system tests (tests/kafkatest, the 3-broker cluster that
    streams/streams_eos_test.py runs on): the offsets topic gets ``min(3, nodes)`` copies
    and one partition per node (kafkatest's kafka.properties template), and the
    transaction state log Kafka's own defaults, 3 copies with min ISR 2 (kafkatest leaves
    them as they are). The EOS test's Streams app creates its internal topics with
    replication.factor=3 (EosTestClient); here the job's own topics get theirs from
    PROCESSOR_REPLICATION_FACTOR (replication.py). Kept from the single node: 10 transaction
    log partitions (50 by default) for faster first coordinator lookups, and no broker-wide
    min.insync.replicas (kafkatest sets none either), so a test's own 1-copy topic stays
    writable; the job's topics carry min.insync.replicas=2 as a topic setting.

    >>> cluster_properties(3)["transaction.state.log.min.isr"]
    '2'
    """
    copies = min(3, nodes)
    isr = str(min_insync(copies))
    return {
        "offsets.topic.replication.factor": str(copies),
        "offsets.topic.num.partitions": str(nodes),
        "transaction.state.log.replication.factor": str(copies),
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": str(copies),
        "share.coordinator.state.topic.min.isr": isr,
    }


@dataclass(frozen=True)
class NodeState:
    node_id: int
    port: int
    pid: int | None  # None: not running


@dataclass
class LocalCluster:
    """``nodes`` local Kafka nodes as one cluster; ``nodes=1`` is the single broker.

    Example::

        cluster = LocalCluster(nodes=3, port=39092, data_dir=tmp / "kafka")
        cluster.start()  # also brings back any node that is not running
        print(cluster.bootstrap)  # 127.0.0.1:39092,127.0.0.1:39093,127.0.0.1:39094
        cluster.stop()
    """

    nodes: int = 1
    port: int = 9092
    data_dir: Path = field(default_factory=default_data_dir)
    cache_dir: Path = field(default_factory=default_cache_dir)
    heap: str = "512m"
    # Per node (node 1 first), for a partition test that runs each node in a network
    # namespace of its own (tests/netns.py): the address it listens on and advertises (its
    # controller too), and a command prefix to launch it with (``ip netns exec <ns>``).
    # Empty: every node on loopback, launched as it is.
    hosts: list[str] = field(default_factory=list)
    prefixes: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).expanduser().resolve()
        self.layout = port_layout(self.port, self.nodes)
        for name, given in (("hosts", self.hosts), ("prefixes", self.prefixes)):
            if given and len(given) != self.nodes:
                raise BrokerError(f"{len(given)} {name} for {self.nodes} brokers")

    def host(self, node_id: int) -> str:
        """The address node ``node_id`` (from 1) listens on."""
        return self.hosts[node_id - 1] if self.hosts else HOST

    def _prefix(self, node_id: int) -> list[str]:
        return list(self.prefixes[node_id - 1]) if self.prefixes else []

    @classmethod
    def found(cls, data_dir: Path | None = None, port: int = 9092) -> LocalCluster:
        """The cluster that ``data_dir`` holds: as many nodes as its ``cluster.json`` says,
        else the single broker."""
        path = Path(data_dir or default_data_dir()).expanduser().resolve()
        nodes = _read_state(path / "cluster.json").get("nodes", 1)
        return cls(nodes=nodes if isinstance(nodes, int) else 1, port=port, data_dir=path)

    @property
    def bootstrap(self) -> str:
        return ",".join(
            f"{self.host(i)}:{port}" for i, port in enumerate(self.layout.brokers, start=1)
        )

    @property
    def state_file(self) -> Path:
        return self.data_dir / "cluster.json"

    def broker(self, node_id: int, cluster_id: str = "") -> LocalBroker:
        """Node ``node_id`` (from 1) as a ``LocalBroker``."""
        if self.nodes == 1:
            return LocalBroker(
                port=self.port,
                data_dir=self.data_dir,
                cache_dir=self.cache_dir,
                heap=self.heap,
                host=self.host(1),
                prefix=self._prefix(1),
            )
        voters = ",".join(
            f"{i}@{self.host(i)}:{port}" for i, port in enumerate(self.layout.controllers, start=1)
        )
        return LocalBroker(
            port=self.layout.brokers[node_id - 1],
            controller_port=self.layout.controllers[node_id - 1],
            data_dir=self.data_dir / f"node-{node_id}",
            cache_dir=self.cache_dir,
            heap=self.heap,
            node_id=node_id,
            voters=voters,
            cluster_id=cluster_id,
            overrides=cluster_properties(self.nodes),
            host=self.host(node_id),
            prefix=self._prefix(node_id),
        )

    def brokers(self, cluster_id: str = "") -> list[LocalBroker]:
        return [self.broker(i, cluster_id) for i in range(1, self.nodes + 1)]

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 120) -> None:
        """Start every node that is not running; return once all serve transactions and
        every partition has all its replicas in sync (a node brought back has caught up).

        ``timeout`` bounds the wait, not the one-time jar download.
        """
        self.check_layout()
        if self.nodes == 1:
            self.broker(1).start(timeout)
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with maven.locked(self.data_dir / ".start.lock"):
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        brokers = self.brokers(self._cluster_id())
        running = [(broker, broker.running_pid()) for broker in brokers]
        stopped = [broker for broker, pid in running if pid is None]
        if stopped:
            stopped[0].fetch()  # once, before the nodes share the jars
        # Formatting runs a JVM per node: side by side, as the brokers will run.
        with ThreadPoolExecutor(max_workers=len(brokers)) as pool:
            list(pool.map(LocalBroker.prepare, stopped))
        deadline = time.monotonic() + timeout
        launched: list[tuple[LocalBroker, subprocess.Popen[bytes], int]] = []
        try:
            for broker in stopped:
                launched.append((broker, *broker.launch()))
            # Only now can the first node become ready: its controller needs a majority.
            for broker, proc, log_offset in launched:
                broker.wait_launched(proc, log_offset, deadline)
        except BaseException:
            # Nodes this call launched that never became ready would hold their ports.
            for broker, _proc, _offset in launched:
                with contextlib.suppress(BrokerError):
                    broker.stop(10.0)
            raise
        for broker, pid in running:
            if pid is not None:
                broker.start(max(1.0, deadline - time.monotonic()))
        # Ready nodes are not enough for the next fault: one brought back must have caught
        # up, or killing another would leave partitions below min.insync.replicas.
        self._wait_in_sync(deadline)

    def _wait_in_sync(self, deadline: float) -> None:
        while True:
            remaining = deadline - time.monotonic()
            gap = replication_gaps(self.bootstrap, self.nodes, max(0.5, min(remaining, 5.0)))
            if gap is None:
                return
            if remaining <= 0:
                raise BrokerError(f"the cluster at {self.bootstrap} is not in sync in time: {gap}")
            time.sleep(0.5)

    def check_layout(self) -> None:
        """Refuse, in one line, to start a layout the data dir does not hold: a cluster where a
        single broker keeps its data (running or not), or a single broker where a cluster's
        nodes do. Started anyway, the second layout would take over the first's files, and the
        running one could no longer be stopped or checked."""
        held = _read_state(self.state_file).get("nodes")
        if self.nodes == 1 and isinstance(held, int) and held > 1:
            raise BrokerError(
                f"{self.data_dir} holds a cluster of {held} brokers; start it with "
                f"--brokers {held}, or give the single broker another --data-dir"
            )
        single = self.data_dir / "data" / "meta.properties", self.data_dir / "kafka.pid"
        if self.nodes > 1 and any(path.exists() for path in single):
            raise BrokerError(
                f"{self.data_dir} holds a single broker's data; give the cluster another "
                "--data-dir (or stop that broker and remove the dir)"
            )

    def _cluster_id(self) -> str:
        state = _read_state(self.state_file)
        if state:
            if state.get("nodes") != self.nodes:
                raise BrokerError(
                    f"{self.data_dir} holds a cluster of {state.get('nodes')} brokers, not "
                    f"{self.nodes}; use another --data-dir"
                )
            return str(state["cluster_id"])
        cluster_id = new_cluster_id()
        self.state_file.write_text(json.dumps({"nodes": self.nodes, "cluster_id": cluster_id}))
        return cluster_id

    def stop(self, timeout: float = 30) -> None:
        """Stop every node; a no-op for those not running.

        All nodes get SIGTERM at once: stopped one by one, the last ones would wait for a
        controller quorum that is already gone. SIGKILL for any left after ``timeout``.
        """
        brokers = self.brokers()
        pids = [(broker, broker.status_pid()) for broker in brokers]
        for _broker, pid in pids:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for broker, pid in pids:
            if pid is not None and not wait_exit(pid, None, max(0.0, deadline - time.monotonic())):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if not wait_exit(pid, None, 10.0):
                    raise BrokerError(f"Kafka node {broker.node_id} (pid {pid}) survived SIGKILL")
            broker.pid_file.unlink(missing_ok=True)

    def status(self) -> list[NodeState]:
        """Each node's pid (None: not running) and the port it runs (or last ran) on."""
        return [
            NodeState(broker.node_id, broker.configured_port() or broker.port, broker.status_pid())
            for broker in self.brokers()
        ]


def _read_state(path: Path) -> dict[str, object]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


# --------------------------------------------------------------------- CLI

_EPILOG = f"""\
ports: with --brokers 1 (the default) the broker listens on --port P and its controller on
P+1. With --brokers N, broker i (from 1) listens on P+i-1 and its controller on
P+{CONTROLLER_OFFSET}+i-1; every node is a broker and a KRaft controller (an N-voter quorum).

A cluster of 3 gives the transaction state log and the offsets topic 3 copies with
min.insync.replicas=2; jobs then create their topics with 3 copies too
(PROCESSOR_REPLICATION_FACTOR, default min(3, brokers)).

start is idempotent: it starts whichever node is not running (a killed broker comes back)
and returns once every partition is in sync. Without --brokers, start, stop and status
handle the whole cluster the data dir holds.

examples:
  processor kafka start                      # one broker on 127.0.0.1:9092
  processor kafka start --brokers 3          # 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094
  processor kafka status
  processor kafka stop
"""


def main(argv: list[str]) -> int:
    """``processor kafka start|stop|status``: manage the local development broker or cluster."""
    parser = argparse.ArgumentParser(
        prog="processor kafka",
        description=f"Run a local Apache Kafka {KAFKA_VERSION} broker, or a cluster of several.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--port", type=int, default=9092, help="first PLAINTEXT port on 127.0.0.1 (default 9092)"
    )
    parser.add_argument(
        "--brokers",
        type=int,
        default=None,
        help="nodes in the cluster, 1 to 9 (default: as many as the data dir holds, 1 if new)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="broker state, config and kafka.log (default: $PROCESSOR_KAFKA_DATA or "
        "~/.local/share/processor/kafka); a cluster's nodes in node-1, node-2...",
    )
    args = parser.parse_args(argv)
    try:
        if args.brokers is None:
            # Whatever the data dir holds: `start` alone brings a whole cluster back too.
            cluster = LocalCluster.found(args.data_dir, args.port)
        else:
            cluster = LocalCluster(args.brokers, args.port, args.data_dir or default_data_dir())
        if args.action == "start":
            return _start(cluster)
        if args.action == "stop":
            # A single broker once started from the same data dir goes too.
            stopping = (
                [cluster]
                if cluster.nodes == 1
                else [cluster, LocalCluster(1, args.port, cluster.data_dir)]
            )
            was = any(node.pid is not None for one in stopping for node in one.status())
            for one in stopping:
                one.stop()
            print("kafka stopped" if was else "kafka was not running")
            return 0
        return _status(cluster)
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _start(cluster: LocalCluster) -> int:
    first = cluster.broker(1)
    if not first.fetched:
        print(
            f"fetching Kafka {KAFKA_VERSION} jars with Maven into {first.libs_dir} "
            "(first run only)...",
            file=sys.stderr,
            flush=True,
        )
    cluster.start()
    pids = ", ".join(str(node.pid) for node in cluster.status())
    if cluster.nodes == 1:
        print(
            f"kafka {KAFKA_VERSION} ready at {cluster.bootstrap} (pid {pids}, log {first.log_file})"
        )
    else:
        print(
            f"kafka {KAFKA_VERSION} cluster of {cluster.nodes} brokers ready at "
            f"{cluster.bootstrap} (pids {pids}, logs {cluster.data_dir}/node-*/kafka.log)"
        )
    return 0


def _status(cluster: LocalCluster) -> int:
    nodes = cluster.status()
    if cluster.nodes == 1:
        state = cluster.broker(1).status()
        print(f"kafka {state}" if state else f"kafka not running (data {cluster.data_dir})")
        return 0 if state else 1
    up = sum(node.pid is not None for node in nodes)
    print(f"kafka cluster of {cluster.nodes} brokers: {up} running (data {cluster.data_dir})")
    for node in nodes:
        where = f"{cluster.host(node.node_id)}:{node.port}"
        state = f"running pid {node.pid} on {where}" if node.pid else f"not running ({where})"
        print(f"  broker {node.node_id}: {state}")
    return 0 if up == cluster.nodes else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
