"""One run of the ported EOS test: the job (`pipeline`) as real processes, three workers
bounced while the `driver` writes its input, then drained, stopped and verified (`verify`).

As streams_eos_test.py: instances stopped cleanly (SIGTERM, then started again) and aborted
(``kill -9``, then started again), each time waiting for the job to commit again before the
next one; the verifier runs once every instance is stopped.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from processor.kafka import clients
from processor.kafka.replication import topic_replication
from tests.eos.driver import Driver
from tests.eos.verify import Result, topics_of, verify
from tests.integration.harness import JobRun, control_messages, recovery_times, wait_until

PIPELINE = Path(__file__).resolve().parent / "pipeline.py"


@dataclass(frozen=True)
class Plan:
    """What a run does: its input, its faults and the job's shape."""

    records: int = 10_000
    rate: float = 500  # input records a second
    bounces: int = 1  # clean: SIGTERM, then a new worker
    kills: int = 1  # kill -9, then a new worker
    seed: int = 1
    partitions: int = 5  # of data, every output and each shuffle (Kafka's test: 5)
    workers: int = 3
    keys: int = 20_000
    # Checkpoints: one transaction per task each. Streams commits every 100 ms under EOS;
    # Kafka's test sets 5 s "to make sure a client is killed having an open transaction".
    interval_ms: int = 5000

    def faults(self) -> list[tuple[str, int]]:
        """``(kind, worker)`` of each fault in order, kinds and workers drawn by the seed."""
        rng = random.Random(self.seed)
        kinds = ["bounce"] * self.bounces + ["kill"] * self.kills
        rng.shuffle(kinds)
        return [(kind, rng.randrange(self.workers)) for kind in kinds]


@dataclass
class Outcome:
    result: Result
    # (time, kind, worker, input records written by then) of each fault
    faults: list[tuple[float, str, int, int]] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    seconds: float = 0.0


class EosRun:
    """The job on topics of its own (``<job>.data``, ``<job>.echo``...) in ``workdir``."""

    def __init__(self, bootstrap: str, workdir: Path, plan: Plan, **settings: str) -> None:
        self.plan = plan
        self.bootstrap = bootstrap
        spec = workdir / "pipeline.py"
        self.job = JobRun(
            bootstrap,
            workdir,
            0,
            plan.interval_ms,
            pipeline=str(spec),
            expected_workers=str(plan.workers),
            shuffle_partitions=str(plan.partitions),
            # Kafka Streams' session timeout is 45 s; JobRun's 2 s moves the tasks of a
            # worker that is merely slow on a loaded machine (three brokers and three
            # workers on two cores), and the moves fence each other over and over.
            **{"worker_timeout_ms": "10000", "heartbeat_interval_ms": "1000", **settings},
        )
        self.topics = topics_of(self.job.job)
        # Before the processes start: they load the file with the job's topic names.
        args = {role: topic for role, topic in self.topics.items()}
        spec.write_text(
            f"import runpy\n\npipeline = runpy.run_path({str(PIPELINE)!r})['build'](**{args!r})\n"
        )
        self._admin = clients.admin(self.job.settings)
        replication = topic_replication(self.job.settings, self._admin)
        for topic in self.topics.values():
            clients.ensure_topic(self._admin, topic, plan.partitions, replication=replication)
        self.driver = Driver(
            bootstrap, self.topics["data"], plan.records, plan.rate, plan.seed, plan.keys
        )

    def run(self, log: bool = True) -> Outcome:
        """Feed, bounce, drain, stop and verify; the processes are stopped on return."""
        started = time.monotonic()
        faults: list[tuple[float, str, int, int]] = []
        try:
            # A coordinator that stays when the job is idle: the feed may pause while a
            # bounced worker's tasks move.
            self.job.start_coordinator(exit_when_idle=False)
            for i in range(self.plan.workers):
                self.job.start_worker(i)
            self.job.wait_for_checkpoints(1, timeout=300)
            schedule = self.plan.faults()
            # The last tenth of the input waits for the faults: each lands while it is written.
            self.driver.hold_tail(self.plan.records // 10 if schedule else 0)
            self.driver.start()
            fed = time.monotonic()
            feed_s = self.plan.records / self.plan.rate
            for i, (kind, worker) in enumerate(schedule):
                at = fed + feed_s * (i + 1) / (len(schedule) + 1)
                time.sleep(max(0.0, at - time.monotonic()))
                faults.append((time.time(), kind, worker, self.driver.sent))
                if log:
                    print(
                        f"{time.strftime('%H:%M:%S')} {kind} worker-{worker} "
                        f"({self.driver.sent} records in)",
                        flush=True,
                    )
                self._fault(kind, worker)
            self.driver.release()
            self.driver.join(feed_s * 3 + 600)
            wait_until(self._drained, 900, "every input record committed")
            # A checkpoint completed after that has every task's output of it committed.
            self.job.wait_for_checkpoints(2, timeout=300)
        finally:
            self.driver.stop()
            self.job.stop()
        result = verify(self.bootstrap, self.job.job)
        kills = [(at, f"worker-{worker}") for at, _, worker, _ in faults]
        recovery = recovery_times(control_messages(self.job), kills)
        return Outcome(result, faults, recovery, time.monotonic() - started)

    def _drained(self) -> bool:
        """The job's committed position in every input partition is the partition's end."""
        topic = self.topics["data"]
        wanted = [TopicPartition(topic, p) for p in range(self.plan.partitions)]
        config = clients.common_config(self.job.settings)
        committed = clients.committed_offsets(config, self.job.settings.group_id, wanted, 10)
        ends = {p: self.driver.acked_per_partition.get(p, 0) for p in range(self.plan.partitions)}
        return all(tp.offset >= ends[tp.partition] for tp in committed)

    def _fault(self, kind: str, worker: int) -> None:
        """Stop worker ``worker`` (cleanly or by SIGKILL), start it again, and wait until
        the job commits again: the next fault hits a job that has recovered."""
        proc = self.job.workers[worker]
        assert proc.poll() is None, f"worker-{worker} died by itself; see {self.job.workdir}"
        if kind == "bounce":
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(120)
            assert code == 0, f"worker-{worker} exited {code} on SIGTERM"
        else:
            self.job.kill_worker(worker, signal.SIGKILL)
        self.job.start_worker(worker)
        # A checkpoint completes only once every task acknowledged it: all run again.
        self.job.wait_for_checkpoints(1, timeout=300)
