"""Coordinator service: creates the job's topics, assigns tasks, triggers checkpoints, records them.

The protocol decisions live in the pure classes it drives (CheckpointCoordinator, assign,
WorkerRegistry); this module is the I/O around them. It holds no state that matters for
correctness: restarted, it learns placement from heartbeats and checkpoint ids from the
checkpoints topic and the tasks, and carries on.
"""

from __future__ import annotations

import collections
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
    TopicPartition,
)

from processor import backoff, faults, metrics
from processor.checkpointing.coordinator import (
    CheckpointCoordinator,
    CompletedCheckpoint,
    FailedCheckpoint,
)
from processor.checkpointing.schedule import TriggerSchedule
from processor.config import Settings, SettingsError
from processor.coordinator.lease import CoordinatorConflict, CoordinatorLease, acquire_waiting
from processor.coordinator.reports import TaskReports
from processor.coordinator.savepoint import apply_savepoint
from processor.coordinator.status import page as status
from processor.coordinator.status.document import job_status
from processor.coordinator.status.history import StatusHistory
from processor.coordinator.status.page import StatusBoard
from processor.coordinator.topics import create_job_topics
from processor.health import LoopHealth
from processor.jobs import load_graph
from processor.jobs.assignment import WorkerRegistry, assign
from processor.kafka import clients
from processor.models import control, internal
from processor.query.forward import ForwardRoutes, WorkerDirectory
from processor.worker.layout import check_history
from processor.worker_hosts import WorkerHosts

log = logging.getLogger(__name__)

CHECKPOINT_HISTORY = 100  # completed checkpoints kept in the compacted topic
MAX_REFUSALS_LOGGED = 10  # worker URLs refused, logged one by one (then only counted)


class CoordinatorService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.graph = load_graph(settings)
        self.incarnation = uuid.uuid4().hex[:12]
        self._admin = clients.admin(settings)
        self._producer = clients.producer(settings, **{"linger.ms": 0, "compression.type": "none"})
        self._labels = {"job_name": settings.job_name}
        self.input_partitions = 0
        self.parallelism: dict[str, int] = {}  # tasks per stage
        self.history: list[dict[str, Any]] = []  # recent completed checkpoints, newest last
        # For the status page: what the heartbeats and acks last said.
        self.board = StatusBoard(settings.job_name)
        self.health = LoopHealth(settings.health_timeout_ms / 1000)
        self._failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=50)
        self.hour = StatusHistory()  # the status page's charts
        self.task_reports = TaskReports()
        self._task_lag: dict[str, int] = {}
        self._task_watermark: dict[str, int] = {}  # event time, ms, of timed jobs' tasks
        self._counts = collections.Counter[str]()
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
            consumer.assign([TopicPartition(s.checkpoints_topic, 0, OFFSET_BEGINNING)])
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
        self.history, dropped = internal.plausible_history(list(records.values()), time.time())
        for record in dropped:
            self._skipped_checkpoints.skip(json.dumps(record).encode(), None)
        self.hour = StatusHistory()
        self.hour.rebuild(self.history)
        return int(self.history[-1]["id"]) if self.history else 0

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
                changed = check_history(
                    self.graph, self.parallelism, self.history[-1] if self.history else None
                )
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
        self, stop: threading.Event, exit_when_idle: bool = False, exit_when_stopped: bool = False
    ) -> bool:
        """Returns whether it ended because a task stopped on a failing record
        (``exit_when_stopped``: end then, as ``processor local`` wants)."""
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
        s = self.settings
        tasks = self.graph.task_ids(self.parallelism)
        checkpoints = CheckpointCoordinator(
            tasks,
            last_id,
            s.checkpoint_timeout_ms / 1000,
            max_concurrent=s.max_concurrent_checkpoints,
        )
        registry = WorkerRegistry(s.worker_timeout_ms / 1000)
        placement: dict[str, str] = {}
        generation = time.time_ns() // 1_000_000  # above any earlier coordinator's generations
        first_generation = generation
        control_consumer = clients.consumer(
            s, **{"group.id": f"{s.job_name}.coordinator", "fetch.wait.max.ms": 10}
        )
        control_consumer.assign([TopicPartition(s.control_topic, 0, OFFSET_END)])
        log.info(
            "coordinator for job %s: %d tasks, checkpoint every %d ms, last completed %d",
            s.job_name,
            len(tasks),
            s.checkpoint_interval_ms,
            last_id,
        )
        heartbeat_s = s.heartbeat_interval_ms / 1000
        interval_s = s.checkpoint_interval_ms / 1000
        started = time.monotonic()
        next_assign = started + 2 * heartbeat_s  # let workers that run already announce themselves
        # A first assignment before the expected workers are up would move half the tasks
        # again a moment later: wait for them, a while at most.
        expected_by = started + 10
        schedule = TriggerSchedule(interval_s, next_trigger=next_assign + interval_s)
        idle_streak = 0
        changed = True
        # The first trigger waits until every task runs (or a while at most): a checkpoint
        # triggered before a source is up can only fail.
        seen_running: set[str] = set()
        first_trigger_by = schedule.next_trigger + 15
        try:
            while not stop.is_set():
                self.health.beat()
                if lease.lost.is_set():
                    raise CoordinatorConflict(lease.reason)
                now = time.monotonic()
                for msg in clients.consume_ready(control_consumer, 1000, 0.05):
                    raw = msg.value()
                    if msg.error() is not None or not raw:
                        continue
                    message = control.decode(raw)
                    if message is None:
                        self._skipped_control.skip(raw, msg.offset())
                    elif isinstance(message, control.Heartbeat):
                        worker, incarnation = message.worker, message.incarnation
                        restarted = registry.is_restart(worker, incarnation)
                        if registry.heartbeat(worker, incarnation, now):
                            changed = True
                        self.task_reports.heard(worker, restarted, message.tasks)
                        if not all(
                            [checkpoints.observe(t.checkpoint) for t in message.tasks.values()]
                        ):
                            # Its liveness counts; an id above the history is not learnt.
                            self._skipped_control.skip(raw, msg.offset())
                        for task, status in message.tasks.items():
                            if task not in checkpoints.tasks:
                                continue  # not a task of this job
                            if status.state == "running":
                                seen_running.add(task)
                            given_up = status.state in ("failed", "stopped")
                            if task not in placement and not given_up:
                                placement[task] = message.worker  # adopt what already runs
                            if exit_when_stopped and status.state == "stopped" and status.reason:
                                log.error("job stopped: task %s: %s", task, status.reason)
                                return True
                    elif isinstance(message, control.Endpoint) and self.state_workers:
                        alive = registry.is_alive(message.worker)
                        refused = self.state_workers.endpoint(message.worker, message.url, alive)
                        if refused is not None:
                            self._skipped_control.skip(raw, msg.offset())
                            self._refused_endpoint(refused)
                    elif isinstance(message, control.Ack):
                        if not self._known(message.task, message.checkpoint, checkpoints):
                            self._skipped_control.skip(raw, msg.offset())
                            continue
                        self._task_lag[message.task] = message.lag
                        if message.watermark_ms is not None:
                            self._task_watermark[message.task] = message.watermark_ms
                        done = checkpoints.on_ack(message, time.time())
                        if done is not None:
                            self._completed(done)
                            quiet = done.records_in == 0 and done.lag == 0
                            idle_streak = idle_streak + 1 if quiet else 0
                    elif isinstance(message, control.Decline):
                        if not self._known(message.task, message.checkpoint, checkpoints):
                            self._skipped_control.skip(raw, msg.offset())
                            continue
                        failed = checkpoints.on_decline(
                            message.checkpoint, message.task, message.reason
                        )
                        if failed is not None:
                            self._failed(failed)
                now = time.monotonic()
                dead = registry.expire(now)
                if dead:
                    log.warning("workers %s missed their heartbeats: moving their tasks", dead)
                    changed = True
                waiting = (
                    generation == first_generation
                    and len(registry.alive) < s.expected_workers
                    and now < expected_by
                )
                if now >= next_assign and not waiting:
                    if changed:
                        placement = assign(tasks, registry.alive, placement)
                        generation += 1
                        changed = False
                        log.info("assignment %d: %s", generation, _describe(placement))
                    self._send(
                        control.Assignment(
                            generation,
                            self.input_partitions,
                            placement,
                            self.incarnation,
                            dict(self.parallelism),
                        )
                    )
                    metrics.workers_alive.labels(**self._labels).set(len(registry.alive))
                    if self.state_workers is not None:
                        self.state_workers.placed(placement, registry.alive)
                    self._publish_status(checkpoints, registry, placement, now)
                    next_assign = now + heartbeat_s
                ready = len(seen_running) == len(tasks) or now >= first_trigger_by
                not_running = self.task_reports.not_running(tasks, placement, registry.alive)
                for failed in checkpoints.fail_waiting_on(not_running):
                    self._failed(failed, repeated=True)
                pending = checkpoints.newest_pending
                if schedule.resend_due(now, pending is not None):
                    assert pending is not None
                    # Again, while it is pending: a source task that started after the trigger
                    # went out, or whose barrier was aborted with its fenced predecessor's
                    # transaction, acts on it now (one that did already ignores it). With one
                    # checkpoint at a time, a lost trigger would otherwise hold every later one
                    # back until the timeout.
                    self._send(control.Trigger(pending.checkpoint_id, pending.triggered_at))
                if schedule.trigger_due(now) and placement and ready and checkpoints.can_trigger:
                    checkpoint_id, dropped = checkpoints.trigger(time.time())
                    self._send(control.Trigger(checkpoint_id, time.time()))
                    for failed in dropped:
                        self._failed(failed)
                    stopped = self.task_reports.given_up()
                    if stopped is not None:
                        # It will never acknowledge: fail the checkpoint now, not at its timeout.
                        # The other tasks commit their part of it all the same.
                        failed = checkpoints.on_decline(checkpoint_id, *stopped)
                        if failed is not None:
                            self._failed(failed, repeated=True)
                    schedule.triggered(now)
                for failed in checkpoints.expire(time.time()):
                    self._failed(failed)
                metrics.checkpoints_in_progress.labels(**self._labels).set(len(checkpoints.pending))
                if exit_when_idle and idle_streak >= 3:
                    log.info("job %s is idle: every input is consumed and committed", s.job_name)
                    return False
        finally:
            control_consumer.close()
            self._producer.flush(5)
        return False

    def _refused_endpoint(self, reason: str) -> None:
        """The first few refused worker URLs, each with its reason (a flood: counted only)."""
        self._counts["refused_endpoints"] += 1
        if self._counts["refused_endpoints"] <= MAX_REFUSALS_LOGGED:
            log.warning("not forwarding state requests there: %s", reason[:300])

    @staticmethod
    def _known(task: str, checkpoint_id: int, checkpoints: CheckpointCoordinator) -> bool:
        """An ack or decline of a task of the job, for an id its history allows."""
        return task in checkpoints.tasks and checkpoints.plausible(checkpoint_id)

    def _send(self, message: control.Message) -> None:
        self._producer.produce(self.settings.control_topic, control.encode(message))
        self._producer.poll(0)

    def _completed(self, done: CompletedCheckpoint) -> None:
        record = done.to_json()
        self._producer.produce(
            self.settings.checkpoints_topic,
            json.dumps(record).encode(),
            key=b"%d" % (done.checkpoint_id % CHECKPOINT_HISTORY),
        )
        self._producer.flush(10)
        faults.reach("coordinator_recorded")
        self.history = [*self.history[-(CHECKPOINT_HISTORY - 1) :], record]
        self.hour.completed(record, self._task_lag)
        labels = self._labels
        self._counts["completed"] += 1
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

    def _publish_status(
        self,
        checkpoints: CheckpointCoordinator,
        registry: WorkerRegistry,
        placement: dict[str, str],
        now: float,
    ) -> None:
        self.board.publish(job_status(self, checkpoints, registry, placement, now))

    def _failed(self, failed: FailedCheckpoint, repeated: bool = False) -> None:
        """``repeated``: one more failure for a reason that lasts; logged once a minute."""
        self._counts["failed"] += 1
        at = time.time()
        self._failures.append(
            {"id": failed.checkpoint_id, "status": "failed", "at": at, "reason": failed.reason}
        )
        self.hour.failed(failed.checkpoint_id, at)
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
