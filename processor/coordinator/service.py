"""Coordinator service: creates the job's topics, assigns tasks, triggers checkpoints, records them.

The decisions live in a pure state machine (`CoordinatorMachine`: control messages and ticks
in, a `Step` out); this module is the I/O around it: it reads the control topic, sends what a
step says, records completed checkpoints, logs, counts and publishes the status page. It holds
no state that matters for correctness: restarted, it learns placement from heartbeats and
checkpoint ids from the checkpoints topic and the tasks, and carries on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaException,
    Message,
    TopicPartition,
)

from processor import backoff, faults, metrics
from processor.checkpointing.coordinator import CompletedCheckpoint, FailedCheckpoint
from processor.config import Settings, SettingsError
from processor.coordinator.journal import CHECKPOINT_HISTORY, CheckpointJournal
from processor.coordinator.lease import CoordinatorConflict, CoordinatorLease, acquire_waiting
from processor.coordinator.machine import CoordinatorMachine, JobFacts, Step, Times
from processor.coordinator.savepoint import apply_savepoint
from processor.coordinator.status import page as status
from processor.coordinator.status.document import JobInfo, job_status
from processor.coordinator.status.page import StatusBoard
from processor.coordinator.topics import create_job_topics
from processor.health import LoopHealth
from processor.jobs import load_graph
from processor.kafka import clients
from processor.models import control, internal
from processor.query.forward import ForwardRoutes, WorkerDirectory
from processor.worker.layout import check_history
from processor.worker_hosts import WorkerHosts

log = logging.getLogger(__name__)

MAX_REFUSALS_LOGGED = 10  # worker URLs refused, logged one by one (then only counted)


class CoordinatorService:
    def __init__(self, settings: Settings) -> None:
        self._drain = False  # `run`'s
        self.settings = settings
        self.graph = load_graph(settings)
        self.incarnation = uuid.uuid4().hex[:12]
        self._admin = clients.admin(settings)
        self._producer = clients.producer(settings, **{"linger.ms": 0, "compression.type": "none"})
        self._labels = {"job_name": settings.job_name}
        self.input_partitions = 0
        self.parallelism: dict[str, int] = {}  # tasks per stage
        self.journal = CheckpointJournal()  # past checkpoints, for the status page
        # For the status page: what the heartbeats and acks last said.
        self.board = StatusBoard(settings.job_name)
        self.health = LoopHealth(settings.health_timeout_ms / 1000)
        self._job = JobInfo(
            settings.job_name, self.incarnation, self.graph, settings.grafana_url or None
        )
        self._refused = 0  # worker URLs refused
        self._repeated = ("", 0.0, 0)  # reason last logged, when, failures held back since
        self._skipped_control = internal.SkippedRecords(settings.job_name, settings.control_topic)
        # Queryable state: where each task's worker serves it (None: PROCESSOR_STATE_API off).
        self.state_workers = (
            WorkerDirectory(WorkerHosts.parse(settings.state_api_workers))
            if settings.state_api == "on"
            else None
        )
        self._skipped_checkpoints = internal.SkippedRecords(
            settings.job_name, settings.checkpoints_topic
        )

    def setup(self) -> None:
        """Create the internal topics; the input topic must exist and is used as it is."""
        s = self.settings
        graph = self.graph
        sources: dict[str, int] = {}
        for topic in graph.plan.source_topics:
            partitions = clients.topic_partitions(self._admin, topic)
            if partitions is None:
                hint = (
                    f"of pipeline {s.pipeline}"
                    if s.pipeline
                    else "(create it, e.g. with `processor produce`, or set PROCESSOR_INPUT_TOPIC)"
                )
                what = "source topic" if s.pipeline else "input topic"
                raise SettingsError(
                    f"{what} {topic!r} does not exist on {s.bootstrap_servers} {hint}"
                )
            sources[topic] = partitions
        self.parallelism = graph.parallelism(sources, s.shuffle_partitions)
        self.input_partitions = self.parallelism[graph.stages[0].name]
        if graph.plan.loops and s.checkpoint_alignment == "unaligned":
            raise SettingsError(
                "invalid setting PROCESSOR_CHECKPOINT_ALIGNMENT=unaligned: the pipeline has a "
                "loop, whose feedback position only an aligned snapshot holds (docs/loops.md)"
            )
        create_job_topics(self._admin, s, graph)
        if s.from_savepoint:
            apply_savepoint(s, self.graph, self._admin, sources)

    def _load_history(self) -> int:
        """Completed checkpoints recorded by earlier coordinators; returns the newest id."""
        s = self.settings
        consumer = clients.consumer(s, **{"group.id": f"{s.job_name}.coordinator"})
        try:
            _, high = clients.watermark_offsets(consumer, TopicPartition(s.checkpoints_topic, 0))
            clients.assign(consumer, [TopicPartition(s.checkpoints_topic, 0, OFFSET_BEGINNING)])
            records: dict[bytes, dict[str, Any]] = {}
            position = 0
            deadline = time.monotonic() + 30
            while position < high and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    value = msg.value()
                    if msg.error() is None and value:
                        record = internal.checkpoint_record(value)
                        if record is None:
                            self._skipped_checkpoints.skip(value, msg.offset())
                        else:
                            records[msg.key() or b""] = record
                    position = max(position, (msg.offset() or 0) + 1)
        finally:
            consumer.close()
        history, dropped = internal.plausible_history(list(records.values()), time.time())
        for record in dropped:
            self._skipped_checkpoints.skip(json.dumps(record).encode(), None)
        return self.journal.load(history)

    def _start(self, stop: threading.Event) -> int | None:
        """Set up the topics and read the history, waiting for Kafka with a backoff.

        Returns the last completed checkpoint id, or None when stopped while waiting.
        """
        for delay in backoff.doubling():
            if stop.is_set():
                return None
            self.health.beat()
            try:
                self.setup()
                last_id = self._load_history()
                # A source stage with other tasks than the last completed checkpoint's: refused
                # before any task runs with the changed channels (see runtime/layout.py).
                changed = check_history(self.graph, self.parallelism, self.journal.last)
                if changed is not None:
                    raise SettingsError(changed)
                return last_id
            except (KafkaException, TimeoutError) as exc:
                clients.check_authentication(self.settings)
                clients.check_denied(self.settings, exc)
                log.warning(
                    "waiting for Kafka at %s: %s (next try in %.1fs)",
                    self.settings.bootstrap_servers,
                    exc,
                    delay,
                )
            stop.wait(delay)
        raise AssertionError("unreachable: the delays never end")

    def run(
        self,
        stop: threading.Event,
        exit_when_idle: bool = False,
        exit_when_stopped: bool = False,
        drain: bool = False,
    ) -> bool:
        """Returns whether it ended because a task stopped on a failing record
        (``exit_when_stopped``: end then, as ``processor local`` wants). ``drain`` (with
        ``exit_when_idle``): once idle, end event time and wait to be idle again, so that
        every window and timer has fired (`CoordinatorMachine.drain`)."""
        self._drain = drain
        s = self.settings
        server = None
        if s.metrics_port:
            try:
                server = status.serve(
                    self.board,
                    s.metrics_host,
                    s.metrics_port,
                    self.health,
                    token=s.api_token.get_secret_value(),
                    state=self._state_routes(),
                    hosts=s.http_host_names,
                )
            except OSError as exc:
                raise SettingsError(
                    f"invalid setting PROCESSOR_METRICS_PORT: cannot serve "
                    f"{s.metrics_host}:{s.metrics_port} ({exc.strerror})"
                ) from None
        try:
            return self._run(stop, exit_when_idle, exit_when_stopped)
        finally:
            if server is not None:
                server.shutdown()

    def _state_routes(self) -> ForwardRoutes | None:
        if self.state_workers is None:
            return None
        timeout_s = self.settings.state_api_timeout_ms / 1000
        partitions = self.settings.shuffle_partitions
        token = self.settings.api_token.get_secret_value()
        return ForwardRoutes(self.graph, partitions, self.state_workers, timeout_s, token)

    def _run(self, stop: threading.Event, exit_when_idle: bool, exit_when_stopped: bool) -> bool:
        s = self.settings
        last_id = self._start(stop)
        if last_id is None:
            return False
        lease = CoordinatorLease(s, self.incarnation)
        if not acquire_waiting(lease, s, stop):
            return False
        try:
            return self._loop(stop, exit_when_idle, exit_when_stopped, last_id, lease)
        finally:
            lease.close()

    def _loop(
        self,
        stop: threading.Event,
        exit_when_idle: bool,
        exit_when_stopped: bool,
        last_id: int,
        lease: CoordinatorLease,
    ) -> bool:
        """Control messages and ticks into the `CoordinatorMachine`, its steps carried out,
        until ``stop``, a lost lease, an idle job (``exit_when_idle``) or a stopped task
        (``exit_when_stopped``: then True)."""
        s = self.settings
        machine = self._machine(last_id)
        control_consumer = clients.consumer(
            s,
            **{
                "group.id": f"{s.job_name}.coordinator",
                "fetch.wait.max.ms": clients.CONTROL_FETCH_WAIT_MS,
            },
        )
        clients.assign(control_consumer, [TopicPartition(s.control_topic, 0, OFFSET_END)])
        log.info(
            "coordinator for job %s: %d tasks, checkpoint every %d ms, last completed %d",
            s.job_name,
            len(machine.job.tasks),
            s.checkpoint_interval_ms,
            last_id,
        )
        try:
            while not stop.is_set():
                self.health.beat()
                if lease.lost.is_set():
                    raise CoordinatorConflict(lease.reason)
                for msg in clients.consume_ready(control_consumer, 1000, 0.05):
                    step = self._receive(msg, machine)
                    if step is not None and step.stopped is not None and exit_when_stopped:
                        log.error("job stopped: task %s: %s", *step.stopped)
                        return True
                now = time.monotonic()
                self._carry_out(machine.tick(now, time.time()), machine, now)
                pending = len(machine.checkpoints.pending)
                metrics.checkpoints_in_progress.labels(**self._labels).set(pending)
                if exit_when_idle and machine.idle:
                    if self._drain and not machine.draining:
                        log.info("job %s is idle: draining, event time ends", s.job_name)
                        machine.drain()
                        continue
                    log.info("job %s is idle: every input is consumed and committed", s.job_name)
                    return False
        finally:
            control_consumer.close()
            self._producer.flush(5)
        return False

    def _machine(self, last_id: int) -> CoordinatorMachine:
        s = self.settings
        times = Times(
            heartbeat_s=s.heartbeat_interval_ms / 1000,
            interval_s=s.checkpoint_interval_ms / 1000,
            checkpoint_timeout_s=s.checkpoint_timeout_ms / 1000,
            worker_timeout_s=s.worker_timeout_ms / 1000,
            max_concurrent=s.max_concurrent_checkpoints,
        )
        job = JobFacts(
            self.graph.task_ids(self.parallelism),
            dict(self.parallelism),
            self.input_partitions,
            self.incarnation,
            s.expected_workers,
        )
        # Generations in ms of the wall clock: above any earlier coordinator's.
        generation = time.time_ns() // 1_000_000
        return CoordinatorMachine(job, times, last_id, time.monotonic(), generation)

    def _receive(self, msg: Message, machine: CoordinatorMachine) -> Step | None:
        """One record of the control topic into the machine (None: not for it)."""
        raw = msg.value()
        if msg.error() is not None or not raw:
            return None
        message = control.decode(raw)
        if message is None:
            self._skipped_control.skip(raw, msg.offset())
            return None
        if isinstance(message, control.Endpoint):
            if self.state_workers is not None:
                alive = machine.registry.is_alive(message.worker)
                refused = self.state_workers.endpoint(message.worker, message.url, alive)
                if refused is not None:
                    self._skipped_control.skip(raw, msg.offset())
                    self._refused_endpoint(refused)
            return None
        now = time.monotonic()
        step = machine.on_message(message, now, time.time())
        if not step.accepted:
            self._skipped_control.skip(raw, msg.offset())
        self._carry_out(step, machine, now)
        return step

    def _carry_out(self, step: Step, machine: CoordinatorMachine, now: float) -> None:
        """What a step asks: logs, checkpoints recorded and failed, messages sent, the
        status page published."""
        if step.dead:
            log.warning("workers %s missed their heartbeats: moving their tasks", step.dead)
        if step.assigned:
            log.info("assignment %d: %s", machine.generation, _describe(machine.placement))
        for done in step.completed:
            self._completed(done, machine.lag)
        for message in step.send:
            self._send(message)
        if step.published:
            alive = machine.registry.alive
            metrics.workers_alive.labels(**self._labels).set(len(alive))
            if self.state_workers is not None:
                self.state_workers.placed(machine.placement, alive)
            self.board.publish(job_status(self._job, self.journal, machine, now))
        for failed, repeated in step.failed:
            self._failed(failed, repeated)

    def _refused_endpoint(self, reason: str) -> None:
        """The first few refused worker URLs, each with its reason (a flood: counted only)."""
        self._refused += 1
        if self._refused <= MAX_REFUSALS_LOGGED:
            log.warning("not forwarding state requests there: %s", reason[:300])

    def _send(self, message: control.Message) -> None:
        self._producer.produce(self.settings.control_topic, control.encode(message))
        self._producer.poll(0)

    def _completed(self, done: CompletedCheckpoint, lag: dict[str, int]) -> None:
        record = done.to_json()
        self._producer.produce(
            self.settings.checkpoints_topic,
            json.dumps(record).encode(),
            key=b"%d" % (done.checkpoint_id % CHECKPOINT_HISTORY),
        )
        self._producer.flush(10)
        faults.reach("coordinator_recorded")
        self._send(control.Completed(done.checkpoint_id))
        self.journal.completed(record, lag)
        labels = self._labels
        metrics.checkpoints_completed.labels(**labels).inc()
        metrics.last_checkpoint_duration.labels(**labels).set(done.duration_s)
        metrics.checkpoint_duration.labels(**labels).observe(done.duration_s)
        metrics.last_checkpoint_size.labels(**labels).set(done.uploaded_bytes)
        metrics.last_checkpoint_full_size.labels(**labels).set(done.state_bytes)
        metrics.last_completed_checkpoint_id.labels(**labels).set(done.checkpoint_id)
        log.info(
            "checkpoint %d complete in %.3fs: %d records, %d bytes uploaded of %d, slowest %s",
            done.checkpoint_id,
            done.duration_s,
            done.records_in,
            done.uploaded_bytes,
            done.state_bytes,
            done.slowest_task(),
        )

    def _failed(self, failed: FailedCheckpoint, repeated: bool = False) -> None:
        """``repeated``: one more failure for a reason that lasts; logged once a minute."""
        self.journal.failed(failed, time.time())
        metrics.checkpoints_failed.labels(**self._labels).inc()
        if repeated:
            now = time.monotonic()
            last_reason, last_at, held = self._repeated
            if failed.reason == last_reason and now - last_at < 60:
                self._repeated = (last_reason, last_at, held + 1)
                return
            self._repeated = (failed.reason, now, 0)
            if held:
                log.warning("%d more checkpoints failed for the same reason", held)
        log.warning("checkpoint %d failed: %s", failed.checkpoint_id, failed.reason)


def _describe(placement: dict[str, str]) -> str:
    by_worker: dict[str, list[str]] = {}
    for task, worker in sorted(placement.items()):
        by_worker.setdefault(worker, []).append(task)
    return "; ".join(f"{w}: {' '.join(ts)}" for w, ts in sorted(by_worker.items()))
