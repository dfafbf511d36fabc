"""Network partitions as faults of the chaos run (``python -m tests.chaos --brokers 3 --netns``).

With ``--netns`` every broker and every worker runs in a network namespace of its own
(tests/netns.py: hosts ``k1``..``k3`` and ``w0``..``w2``), the coordinator, the feeder and the
verifier in the root namespace. Two more fault kinds then join the broker faults
(tests/broker_faults.py), each a cut of one host from everyone else for ``CUT_S``:

- **a worker cut off**: the classic zombie. It still runs its tasks but reaches no broker; the
  coordinator stops hearing it, moves its tasks to the others, and once healed the zombie's
  transactions belong to an older producer epoch and are fenced. It still reaches the
  checkpoint storage all along (a shared directory: no network between), which its fenced
  tasks must not corrupt; the worker kills of the run make the tasks restore from it.
  ``moved_s`` is the time until the coordinator assigned the worker's tasks elsewhere.
- **a broker cut off**: the one that leads the most partitions. The controller stops hearing
  it and moves its leaderships (``moved_s``); its followers drop out of the ISRs of the
  others. Healed, it catches up, and the preferred leaders are elected again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from processor.localkafka.cluster import LocalCluster
from processor.models import control
from tests import netns
from tests.broker_faults import MOVE_TIMEOUT_S, ClusterFaults, FaultRecord
from tests.integration.harness import ControlLog, JobRun, control_messages

WORKER_CUT = "network partition (worker cut off)"
BROKER_CUT = "network partition (broker cut off)"
CUT_S = (20.0, 60.0)  # how long a host stays cut off, drawn in this range


@contextlib.contextmanager
def chaos_network(brokers: int, workers: int) -> Iterator[netns.TestNetwork]:
    """The test network of a chaos run: hosts ``k1``.. for the brokers, ``w0``.. for the
    workers; everything removed on exit."""
    with netns.TestNetwork() as net:
        for node in range(1, brokers + 1):
            net.add_host(f"k{node}")
        for i in range(workers):
            net.add_host(f"w{i}")
        yield net


def cluster_on(net: netns.TestNetwork, nodes: int, port: int, **kwargs: object) -> LocalCluster:
    """A ``LocalCluster`` whose node N runs in host ``kN``, on its address."""
    hosts = [net.hosts[f"k{node}"] for node in range(1, nodes + 1)]
    return LocalCluster(
        nodes=nodes,
        port=port,
        hosts=[host.address for host in hosts],
        prefixes=[host.prefix for host in hosts],
        **kwargs,  # type: ignore[arg-type]
    )


def place_workers(net: netns.TestNetwork, run: JobRun, workers: int) -> None:
    """Worker ``i`` of ``run`` starts in host ``wi`` (every start, restarts too)."""
    run.worker_prefix = {i: net.hosts[f"w{i}"].prefix for i in range(workers)}


def _network(faults: ClusterFaults) -> netns.TestNetwork:
    if faults.network is None:
        raise RuntimeError("a network partition needs the run's test network (--netns)")
    return faults.network


def cut_worker(faults: ClusterFaults) -> None:
    """Cut a running worker off for ``CUT_S``, then heal it (it is left running: a zombie)."""
    net = _network(faults)
    running = {i for i, proc in faults.run.workers.items() if proc.poll() is None}
    if not running:
        raise RuntimeError("no worker running to cut off")
    # One that holds tasks now (a worker just restarted may have none yet): their move is
    # what the cut is about.
    assignments = [m for _, m in control_messages(faults.run) if isinstance(m, control.Assignment)]
    now = assignments[-1].tasks.values() if assignments else ()
    holding = {int(w.rpartition("-")[2]) for w in now}
    i = faults.rng.choice(sorted(running & holding or running))
    host = net.hosts[f"w{i}"]
    seconds = faults.rng.uniform(*CUT_S)
    record = FaultRecord(WORKER_CUT, time.time(), -1 - i)
    faults.records.append(record)
    faults.log(f"{WORKER_CUT}: worker-{i} ({host.address}) for {seconds:.0f} s")
    net.cut(host)
    try:
        time.sleep(seconds)
    finally:
        net.heal(host)
    faults.log(f"  worker-{i} healed after {time.time() - record.started:.1f} s")


def cut_broker(faults: ClusterFaults) -> None:
    """Cut off the broker that leads the most partitions for ``CUT_S``; its leaderships must
    move; healed, it must catch up."""
    net = _network(faults)
    node = faults.busiest()
    led = [tp for tp, leader in faults.leaders().items() if leader == node]
    host = net.hosts[f"k{node}"]
    seconds = faults.rng.uniform(*CUT_S)
    record = FaultRecord(BROKER_CUT, time.time(), node)
    faults.records.append(record)
    faults.log(f"{BROKER_CUT}: node {node} ({host.address}, leads {len(led)}) for {seconds:.0f} s")
    net.cut(host)
    try:
        record.moved_s = faults._wait_moved(node, led, record.started, MOVE_TIMEOUT_S)
        time.sleep(max(0.0, record.started + seconds - time.time()))
    finally:
        net.heal(host)
    faults.log(f"  node {node} healed after {time.time() - record.started:.1f} s")
    faults.restart()  # it runs: this waits until it has caught up


FAULTS = {WORKER_CUT: cut_worker, BROKER_CUT: cut_broker}


def worker_moves(messages: ControlLog, records: list[FaultRecord]) -> None:
    """Set ``moved_s`` of each worker cut: seconds until an assignment made after the cut
    gave none of the job's tasks to the cut-off worker (None: never, while cut)."""
    for record in records:
        if record.kind != WORKER_CUT:
            continue
        worker = f"worker-{-1 - record.victim}"
        for ts, message in messages:
            if (
                ts >= record.started
                and isinstance(message, control.Assignment)
                and worker not in message.tasks.values()
            ):
                record.moved_s = ts - record.started
                break
