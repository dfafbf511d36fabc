"""Broker faults of the chaos run on a local 3-node cluster (tests/chaos.py ``--brokers 3``).

Each fault is a function in `FAULTS` (fault name -> function of a `ClusterFaults`), so a new
kind (a network partition) is one more entry. Every fault that takes a broker away also
checks that it hit: the partitions the victim led (the job's topics, the transaction log,
the offsets topic) must get other leaders, or the active KRaft controller another one.
Those that did not are counted as misses.

Victims:
- the leader of the transaction log partition of a task's transactional id
  (``<job>.<task id>``, processor/worker/task.py), found as Kafka's
  TransactionStateManager.partitionFor does: abs(String.hashCode(id)) % partitions;
- the broker that leads the most partitions of the job's shuffle topics (``<job>.shuffle...``);
- a broker that leads the most partitions, stopped past the brokers' session timeout
  (``broker.session.timeout.ms``, 9 s by default in Kafka 4.4, KRaftConfigs), so the
  controller fences it, then continued;
- every broker in turn, SIGTERM and start (a rolling restart);
- the active controller: the leader of the highest epoch in the nodes' ``quorum-state``
  files (the jar set the tests fetch has no kafka-tools for MetadataQuorumCommand, and
  confluent-kafka no describeMetadataQuorum).

A killed broker comes back with ``LocalCluster.start()``, which starts only the nodes not
running and returns once every partition is in sync again: the next fault cannot find a
partition below ``min.insync.replicas``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.kafka import clients
from processor.localkafka.brokertools import wait_exit
from processor.localkafka.cluster import LocalCluster
from processor.models import control
from tests.integration.harness import ControlLog, JobRun, control_messages
from tests.netns import TestNetwork

SESSION_TIMEOUT_S = 9.0  # broker.session.timeout.ms, Kafka's default (not overridden here)
MOVE_TIMEOUT_S = 40.0  # for leadership to leave a dead broker: the session timeout and more
RESTART_TIMEOUT_S = 240.0
TRANSACTION_LOG = "__transaction_state"
INTERNAL_TOPICS = (TRANSACTION_LOG, "__consumer_offsets")

TXN_LEADER_KILL = "broker SIGKILL (transaction coordinator leader)"
SHUFFLE_LEADER_KILL = "broker SIGKILL (shuffle leader)"
BROKER_PAUSE = "broker SIGSTOP past session timeout"
ROLLING_RESTART = "rolling restart"
CONTROLLER_KILL = "controller SIGKILL"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, in 32-bit two's complement.

    >>> java_string_hash("hello"), java_string_hash(""), java_string_hash("polygenelubricants")
    (99162322, 0, -2147483648)
    """
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """The transaction log partition whose leader coordinates ``transactional_id``.

    Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative).

    >>> transaction_partition("polygenelubricants", 10), transaction_partition("hello", 10)
    (0, 2)
    """
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


Leaders = dict[tuple[str, int], int]  # (topic, partition) -> leader node id (-1: none)


@dataclass
class FaultRecord:
    kind: str
    started: float  # wall clock, comparable with the control topic's timestamps
    victim: int  # node id; 0: every node (rolling restart); -1 - i: worker i
    moved_s: float | None = None  # until leadership left the victim (None: not seen)
    confirmed: bool | None = None  # transaction coordinator kill: the id is in that partition


@dataclass
class ClusterFaults:
    """What the broker faults act on and what they record."""

    cluster: LocalCluster
    run: JobRun
    rng: random.Random
    log_path: Path
    records: list[FaultRecord] = field(default_factory=list)
    # The run's test network (tests/netns.py) when brokers and workers run in hosts of
    # their own: the network partitions of tests/network_faults.py need it.
    network: TestNetwork | None = None
    _tasks: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.admin = clients.admin(self.run.settings)

    # ------------------------------------------------------------------ observation

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(f"chaos: {line}", file=sys.stderr, flush=True)
        with self.log_path.open("a") as out:
            out.write(line + "\n")

    def leaders(self, avoid: int = 0) -> Leaders:
        """Leader of every partition of the job's and Kafka's internal topics; ``avoid``: as
        a fresh client sees it that knows only the other nodes. A paused node keeps its
        connections open, so a client that knows it may send it the metadata request and
        wait in vain (seen: leadership "never" left a node paused for 40 s)."""
        job = f"{self.run.job}."
        if avoid:
            others = [
                f"{self.cluster.host(node)}:{port}"
                for node, port in enumerate(self.cluster.layout.brokers, start=1)
                if node != avoid
            ]
            probe = AdminClient({"bootstrap.servers": ",".join(others), "log_level": 0})
            metadata = probe.list_topics(timeout=5)
        else:
            metadata = self.admin.list_topics(timeout=10)
        return {
            (name, p.id): p.leader
            for name, topic in metadata.topics.items()
            if name.startswith(job) or name in INTERNAL_TOPICS or name == self.input_topic
            for p in topic.partitions.values()
        }

    @property
    def input_topic(self) -> str:
        return self.run.settings.input_topic

    def tasks(self) -> list[str]:
        """The job's task ids, from its latest assignment (they stay the same all run)."""
        if not self._tasks:
            assignments = [
                m for _, m in control_messages(self.run) if isinstance(m, control.Assignment)
            ]
            if not assignments:
                raise RuntimeError("no assignment on the control topic yet")
            self._tasks = sorted(assignments[-1].tasks)
        return self._tasks

    def controller(self) -> tuple[int, int]:
        """(leader id, epoch) of the KRaft quorum: the latest any node has recorded."""
        best = (-1, -1)
        for node in range(1, self.cluster.nodes + 1):
            path = self.cluster.broker(node).data_dir / "data" / "__cluster_metadata-0"
            try:
                state = json.loads((path / "quorum-state").read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if leader >= 0 and epoch > best[1]:
                best = (leader, epoch)
        return best

    # ------------------------------------------------------------------ actions

    def pid(self, node: int) -> int:
        pid = self.cluster.broker(node).status_pid()
        if pid is None:
            raise RuntimeError(f"node {node} is not running")
        return pid

    def kill(self, kind: str, node: int, why: str) -> None:
        """SIGKILL ``node``, wait until the partitions it led have other leaders, restart it."""
        before = self.leaders()
        led = [tp for tp, leader in before.items() if leader == node]
        record = FaultRecord(kind, time.time(), node)
        self.records.append(record)
        pid = self.pid(node)
        self.log(f"{kind}: SIGKILL node {node} (pid {pid}, {why}; leads {len(led)} partitions)")
        os.kill(pid, signal.SIGKILL)
        if not wait_exit(pid, None, 10):
            raise RuntimeError(f"node {node} (pid {pid}) survived SIGKILL")
        record.moved_s = self._wait_moved(node, led, record.started, MOVE_TIMEOUT_S)
        time.sleep(self.rng.uniform(0, 2))
        self.restart()

    def _wait_moved(
        self, node: int, led: list[tuple[str, int]], since: float, timeout: float
    ) -> float | None:
        """Seconds from ``since`` until none of ``led`` has ``node`` as leader (None: not in
        ``timeout``); every one of them must have a leader again, or nothing moved yet."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                now = self.leaders(avoid=node)
            except KafkaException:
                now = {}
            if now and all(now.get(tp, -1) not in (node, -1) for tp in led):
                moved = time.time() - since
                self.log(f"  leadership of {len(led)} partitions left node {node} in {moved:.1f} s")
                return moved
            time.sleep(0.25)
        self.log(f"  leadership did NOT leave node {node} within {timeout:.0f} s")
        return None

    def restart(self) -> None:
        """Start what is not running, wait until in sync, then give every partition its
        preferred leader back: without that, leadership piles up on the nodes that never
        went down, and a later fault on another node would hit nothing (Kafka's own
        rebalance waits leader.imbalance.check.interval.seconds, 5 minutes)."""
        started = time.monotonic()
        self.cluster.start(timeout=RESTART_TIMEOUT_S)
        self.log(f"  cluster whole and in sync again after {time.monotonic() - started:.1f} s")
        try:
            self.admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30)
        except KafkaException as exc:  # ELECTION_NOT_NEEDED and the like: nothing to move
            self.log(f"  preferred leader election: {exc}")

    def busiest(self) -> int:
        """A node that leads the most partitions (random among equals)."""
        counts = collections.Counter(self.leaders().values())
        counts.pop(-1, None)
        top = max(counts.values(), default=0)
        nodes = range(1, self.cluster.nodes + 1)
        return self.rng.choice([n for n in nodes if counts.get(n, 0) == top])

    def holds(self, partition: int, transactional_id: str, timeout: float = 30) -> bool:
        """Whether ``transactional_id``'s state is in that partition of the transaction log:
        the check that `transaction_partition` finds the coordinator Kafka uses."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": f"{self.run.job}.faults",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        wanted = transactional_id.encode()
        try:
            tp = TopicPartition(TRANSACTION_LOG, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([TopicPartition(TRANSACTION_LOG, partition, low)])
            deadline = time.monotonic() + timeout
            position = low
            while position < high and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 1.0):
                    position = max(position, (msg.offset() or 0) + 1)
                    if msg.error() is None and wanted in (msg.key() or b""):
                        return True
            return False
        finally:
            consumer.close()


def kill_transaction_coordinator(faults: ClusterFaults) -> None:
    """SIGKILL the leader of a random task's transaction log partition, then restart it."""
    task = faults.rng.choice(faults.tasks())
    txn_id = f"{faults.run.job}.{task}"
    leaders = faults.leaders()
    partitions = sum(1 for topic, _ in leaders if topic == TRANSACTION_LOG)
    partition = transaction_partition(txn_id, partitions)
    node = leaders[TRANSACTION_LOG, partition]
    confirmed = faults.holds(partition, txn_id)
    faults.kill(
        TXN_LEADER_KILL,
        node,
        f"leads {TRANSACTION_LOG}-{partition}, {txn_id}'s, "
        + ("found there" if confirmed else "NOT found there"),
    )
    faults.records[-1].confirmed = confirmed


def kill_shuffle_leader(faults: ClusterFaults) -> None:
    """SIGKILL the broker that leads the most partitions of the job's shuffle topics."""
    prefix = f"{faults.run.job}.shuffle"
    counts = collections.Counter(
        leader for (topic, _), leader in faults.leaders().items() if topic.startswith(prefix)
    )
    counts.pop(-1, None)
    if not counts:
        raise RuntimeError(f"no shuffle topic {prefix}* with leaders")
    top = max(counts.values())
    node = faults.rng.choice(sorted(n for n, c in counts.items() if c == top))
    faults.kill(SHUFFLE_LEADER_KILL, node, f"leads {top} shuffle partitions")


def pause_broker(faults: ClusterFaults) -> None:
    """SIGSTOP a broker that leads the most partitions past the session timeout, SIGCONT it
    once it was fenced (its partitions have other leaders) and a little more."""
    node = faults.busiest()
    led = [tp for tp, leader in faults.leaders().items() if leader == node]
    record = FaultRecord(BROKER_PAUSE, time.time(), node)
    faults.records.append(record)
    pid = faults.pid(node)
    faults.log(f"{BROKER_PAUSE}: SIGSTOP node {node} (pid {pid}, leads {len(led)} partitions)")
    os.kill(pid, signal.SIGSTOP)
    try:
        record.moved_s = faults._wait_moved(node, led, record.started, MOVE_TIMEOUT_S)
        # Past the session timeout in any case, and some more while fenced.
        time.sleep(max(0.0, record.started + SESSION_TIMEOUT_S - time.time()))
        time.sleep(faults.rng.uniform(1, 4))
    finally:
        os.kill(pid, signal.SIGCONT)
    faults.log(f"  SIGCONT node {node} after {time.time() - record.started:.1f} s")
    faults.restart()  # it runs: this waits until it has caught up


def rolling_restart(faults: ClusterFaults) -> None:
    """Every broker in turn: SIGTERM (a controlled shutdown), start, wait until in sync."""
    record = FaultRecord(ROLLING_RESTART, time.time(), 0)
    faults.records.append(record)
    faults.log(f"{ROLLING_RESTART}: nodes 1..{faults.cluster.nodes}")
    for node in range(1, faults.cluster.nodes + 1):
        started = time.monotonic()
        faults.cluster.broker(node).stop()
        faults.log(f"  node {node} stopped in {time.monotonic() - started:.1f} s")
        faults.restart()


def kill_controller(faults: ClusterFaults) -> None:
    """SIGKILL the active KRaft controller; a new one must be elected; then restart it."""
    node, epoch = faults.controller()
    if node < 0:
        raise RuntimeError("no node has recorded a quorum leader")
    record = FaultRecord(CONTROLLER_KILL, time.time(), node)
    faults.records.append(record)
    pid = faults.pid(node)
    faults.log(f"{CONTROLLER_KILL}: SIGKILL node {node} (pid {pid}), leader of epoch {epoch}")
    os.kill(pid, signal.SIGKILL)
    if not wait_exit(pid, None, 10):
        raise RuntimeError(f"node {node} (pid {pid}) survived SIGKILL")
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while time.monotonic() < deadline:
        leader, now = faults.controller()
        if now > epoch and leader not in (node, -1):
            record.moved_s = time.time() - record.started
            faults.log(f"  node {leader} leads the quorum (epoch {now}) in {record.moved_s:.1f} s")
            break
        time.sleep(0.25)
    else:
        faults.log(f"  NO new quorum leader within {MOVE_TIMEOUT_S:.0f} s")
    time.sleep(faults.rng.uniform(0, 2))
    faults.restart()


Fault = Callable[[ClusterFaults], None]

# Fault name -> what it does. Each is counted in the chaos summary under its name.
FAULTS: dict[str, Fault] = {
    TXN_LEADER_KILL: kill_transaction_coordinator,
    SHUFFLE_LEADER_KILL: kill_shuffle_leader,
    BROKER_PAUSE: pause_broker,
    ROLLING_RESTART: rolling_restart,
    CONTROLLER_KILL: kill_controller,
}


def plan(
    rng: random.Random,
    faults: int,
    kinds: list[str],
    share: float = 0.3,
    known: Collection[str] = FAULTS.keys(),
) -> dict[int, str]:
    """Which of ``faults`` slots get a cluster fault and which: about ``share`` of them, at
    least one, the kinds in turn from the first (each kind once before any twice);
    ``known``: the fault names allowed."""
    for kind in kinds:
        if kind not in known:
            raise ValueError(f"unknown cluster fault {kind!r}; known: {sorted(known)}")
    if not kinds or not faults:
        return {}
    n = min(faults, max(1, round(faults * share)))
    slots = sorted(rng.sample(range(faults), n))
    return {slot: kinds[i % len(kinds)] for i, slot in enumerate(slots)}


def recovery(messages: ControlLog, records: list[FaultRecord]) -> dict[str, list[float]]:
    """Per fault kind: seconds from each fault's start until the first checkpoint triggered
    after it was acknowledged by every task of the assignment then in force (the job
    committed again everywhere). Faults whose checkpoint never completed are left out."""
    out: dict[str, list[float]] = collections.defaultdict(list)
    for record in records:
        assignment = [
            m for ts, m in messages if isinstance(m, control.Assignment) and ts < record.started
        ]
        triggers = [
            m.checkpoint
            for ts, m in messages
            if isinstance(m, control.Trigger) and ts >= record.started
        ]
        if not assignment or not triggers:
            continue
        tasks, first = set(assignment[-1].tasks), min(triggers)
        acked: dict[str, float] = {}
        for ts, m in messages:
            if isinstance(m, control.Ack) and m.checkpoint >= first and m.task in tasks:
                acked.setdefault(m.task, ts)
        if tasks and acked.keys() == tasks:
            out[record.kind].append(max(acked.values()) - record.started)
    return dict(out)


def summarize(values: list[float]) -> dict[str, object]:
    values = sorted(values)
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3) if values else None,
        "max": round(values[-1], 3) if values else None,
    }
