"""Worker service: runs the tasks the coordinator assigns to it, one thread per task.

It follows the control topic (assignments, checkpoint triggers), heartbeats its tasks'
states, and forwards the tasks' acknowledgements. A task that fails is restarted after a
backoff if it is still assigned here; its restart *is* its recovery (fence, restore, rewind).
A task that fails for good (``PermanentTaskFailure``: e.g. records it needs were deleted) is not
restarted while it stays assigned here: it is reported failed, with its one-line reason; one
that stopped on a failing record (``PROCESSOR_ON_ERROR=stop``) likewise, reported stopped.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
import uuid

from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

from processor import metrics
from processor.backoff import RestartBackoff
from processor.config import Settings
from processor.errors import OutsideFailure, PermanentTaskFailure
from processor.health import LoopHealth
from processor.jobs import load_graph
from processor.jobs.assignment import FollowedAssignment
from processor.jobs.graph import TaskId
from processor.kafka import clients
from processor.kafka.purge import ShufflePurger
from processor.models import control, internal
from processor.models.limits import MAX_ID_JUMP
from processor.query.forward import advertised_url
from processor.query.owners import QueryRegistry
from processor.query.routes import StateRoutes
from processor.state.dirs import private_dir
from processor.worker.keyed import KeyedTask
from processor.worker.keyed_source import KeyedSourceTask
from processor.worker.source import SourceTask
from processor.worker.task import Task, TaskContext

log = logging.getLogger(__name__)
# gc.set_threshold in a worker process (Python's default: 700, 10, 10).
GC_THRESHOLDS = (100_000, 50, 100)

# The worker's state URL goes out with every this many heartbeats (and at its start): a
# coordinator that restarts learns it within that many heartbeat intervals.
ENDPOINT_EVERY = 10


def unmasked(exc: BaseException) -> BaseException:
    """The error a ``SystemError`` of confluent-kafka's log callback hides.

    confluent-kafka-python calls the ``logger`` it is given while a Kafka error it has just
    raised is still pending (upstream issue #1708, open): the log call then fails with
    ``SystemError: <class 'logging.LogRecord'> returned a result with an exception set``, and
    that replaces the real error, a fenced producer say, which becomes its ``__cause__``.
    Under broker faults the chaos run saw 118 task failures reported so.
    """
    seen = exc
    while isinstance(seen, SystemError) and seen.__cause__ is not None:
        seen = seen.__cause__
    return seen


class TaskRunner:
    def __init__(self, task: Task) -> None:
        self.task = task
        self.error = ""
        self.permanent = False  # failed for good: not to be restarted
        self.started_at = time.monotonic()  # a long run forgives earlier failures
        self._thread = threading.Thread(target=self._run, name=task.ctx.task_id, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.task.run()
            self.task.state = "stopped"
            log.info("task %s stopped", self.task.ctx.task_id)
        except PermanentTaskFailure as exc:
            self.task.state = exc.state  # "stopped": PROCESSOR_ON_ERROR=stop
            self.permanent = True
            self.error = str(exc)
            labels = self.task.labels
            metrics.task_failed_permanently.labels(**labels, reason=exc.reason).inc()
            if exc.state == "stopped":
                metrics.task_stopped.labels(**labels, reason=exc.reason).set(1)
            log.error("%s: %s (task stopped, not restarted)", self.task.ctx.task_id, exc)
        except Exception as raised:
            self.task.state = "failed"
            cause = unmasked(raised)
            self.error = f"{type(cause).__name__}: {cause}"
            # Kafka's errors (a fenced producer, a broker away) are expected and say it all,
            # as outside ones do; anything else is a bug somewhere, and its traceback is what
            # finds it.
            expected = isinstance(cause, KafkaException | OutsideFailure)
            log.error(
                "task %s failed: %s", self.task.ctx.task_id, self.error, exc_info=not expected
            )
        metrics.forget_task(self.task.settings.job_name, self.task.ctx.task_id)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self.task.ctx.stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


class Worker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.graph = load_graph(settings)
        private_dir(settings.state_dir, "PROCESSOR_STATE_DIR")  # refused at start, in one line
        self.worker_id = settings.worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.incarnation = uuid.uuid4().hex[:12]
        self.health = LoopHealth(settings.health_timeout_ms / 1000)
        self._producer = clients.producer(settings, **{"linger.ms": 0, "compression.type": "none"})
        self._control = clients.consumer(
            settings,
            **{
                "group.id": f"{settings.job_name}.workers",
                "fetch.wait.max.ms": clients.CONTROL_FETCH_WAIT_MS,
            },
        )
        self._skipped_control = internal.SkippedRecords(settings.job_name, settings.control_topic)
        self._runners: dict[str, TaskRunner] = {}
        self._backoff: dict[str, RestartBackoff] = {}  # per task that failed here
        self._restart_at: dict[str, float] = {}  # task -> monotonic time it may start again
        # Tasks that failed for good here: (reason, last committed checkpoint, state).
        self._given_up: dict[str, tuple[str, int, str]] = {}
        # Per shuffle topic, shared by its keyed tasks here.
        self._purgers: dict[str, ShufflePurger] = {}
        if settings.shuffle_purge_interval_ms:
            admin = clients.admin(settings)
            self._purgers = {
                topic: ShufflePurger(
                    admin, topic, settings.job_name, settings.shuffle_purge_interval_ms / 1000
                )
                for topic in self.graph.shuffle_topics
            }
        self._followed = FollowedAssignment(settings.worker_timeout_ms / 1000)
        self._assignment: control.Assignment | None = None
        self._newest_trigger = 0  # the highest checkpoint id this worker acted on
        # Queryable state: the gates of this worker's keyed tasks (None: the API is off).
        self.queries: QueryRegistry | None = None
        if settings.state_api == "on" and not settings.metrics_port:
            # No server to answer on: no views to link at every checkpoint either.
            log.warning("PROCESSOR_STATE_API=on, but no PROCESSOR_METRICS_PORT to serve it on")
        elif settings.state_api == "on":
            self.queries = QueryRegistry(self.graph, settings.shuffle_partitions)
        self.state_url = advertised_url(settings) if self.queries is not None else ""
        self._heartbeats = 0

    def state_routes(self) -> StateRoutes | None:
        """The ``/state/`` routes for the metrics port (None: PROCESSOR_STATE_API is off)."""
        if self.queries is None:
            return None
        timeout_s = self.settings.state_api_timeout_ms / 1000
        return StateRoutes(self.queries, self.worker_id, timeout_s, self.settings.job_name)

    def send(self, message: control.Message) -> None:
        """Thread-safe: tasks report through here."""
        self._producer.produce(self.settings.control_topic, control.encode(message))
        self._producer.poll(0)

    def run(self, stop: threading.Event) -> None:
        s = self.settings
        # The tasks make many small containers a batch (a shuffle record decodes into
        # thousands of lists) and drop them with it: at Python's default a young collection
        # every 700 of them, and the older ones scanned again and again, took a third of an
        # uncombined record's CPU (bench/experiments/README.md, per_record.py). What lives
        # long (modules, the pipeline) is frozen out of the collections.
        gc.set_threshold(*GC_THRESHOLDS)
        gc.collect()
        gc.freeze()
        self._wait_for_control_topic(stop)
        if stop.is_set():
            return
        clients.assign(self._control, [TopicPartition(s.control_topic, 0, OFFSET_END)])
        log.info("worker %s (incarnation %s) started", self.worker_id, self.incarnation)
        next_heartbeat = 0.0
        try:
            while not stop.is_set():
                self.health.beat()
                for msg in clients.consume_ready(self._control, 1000, 0.05):
                    raw = msg.value()
                    if msg.error() is None and raw:
                        message = control.decode(raw)
                        if message is None or not self._handle(message):
                            self._skipped_control.skip(raw, msg.offset())
                self._reconcile()
                now = time.monotonic()
                if now >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = now + s.heartbeat_interval_ms / 1000
        finally:
            self._stop_all()
            self._control.close()
            self._producer.flush(5)

    def _wait_for_control_topic(self, stop: threading.Event) -> None:
        announced = 0.0
        while not stop.is_set():
            self.health.beat()
            try:
                if clients.topic_partitions(self._control, self.settings.control_topic, 5):
                    return
            except Exception as exc:  # noqa: BLE001 - broker not there yet: keep waiting
                clients.check_authentication(self.settings)
                clients.check_denied(self.settings, exc)
                reason = str(exc)
            else:
                reason = "no coordinator has created it yet"
            if time.monotonic() - announced > 5:
                log.info("waiting for %s (%s)", self.settings.control_topic, reason)
                announced = time.monotonic()
            stop.wait(0.5)

    def _handle(self, message: control.Message) -> bool:
        """Act on a control message; False for one out of range (skipped and counted)."""
        if control.ahead_of(message, time.time()):
            return False
        if isinstance(message, control.Assignment):
            if self._followed.offer(message, time.monotonic()):
                self._assignment = message
        elif isinstance(message, control.Trigger):
            if message.checkpoint > self._checkpoint_ceiling():
                return False
            self._newest_trigger = max(self._newest_trigger, message.checkpoint)
            for runner in self._runners.values():
                runner.task.request_checkpoint(
                    message.checkpoint, message.triggered_at, message.drain
                )
        elif isinstance(message, control.Completed):
            if message.checkpoint > self._checkpoint_ceiling():
                return False
            for runner in self._runners.values():
                runner.task.checkpoint_completed(message.checkpoint)
        return True

    def _checkpoint_ceiling(self) -> int:
        """The highest checkpoint id a trigger may name: at most `MAX_ID_JUMP` above what
        this worker's tasks committed and the triggers it acted on (issue 41)."""
        committed = [r.task.last_checkpoint for r in self._runners.values()]
        return max([self._newest_trigger, *committed]) + MAX_ID_JUMP

    def _reconcile(self) -> None:
        assignment = self._assignment
        mine = (
            {t for t, w in assignment.tasks.items() if w == self.worker_id} if assignment else set()
        )
        if self.queries is not None:
            self.queries.assigned(assignment.tasks if assignment else {}, mine)
        now = time.monotonic()
        for task_id, runner in list(self._runners.items()):
            if task_id not in mine and not runner.task.ctx.stop.is_set():
                log.info(
                    "task %s is no longer assigned to %s: stopping it", task_id, self.worker_id
                )
                runner.stop()
            if not runner.running:
                del self._runners[task_id]
                if runner.permanent:
                    task = runner.task
                    self._given_up[task_id] = (runner.error, task.last_checkpoint, task.state)
                elif runner.task.state == "failed":
                    # A run of a minute forgives the failures before it.
                    backoff = self._backoff.setdefault(task_id, RestartBackoff(healthy_after_s=60))
                    self._restart_at[task_id] = backoff.next_start(runner.started_at, now)
        for task_id in self._given_up.keys() - mine:
            del self._given_up[task_id]  # moved away: wherever it goes next tries afresh
            metrics.forget_stopped(self.settings.job_name, task_id)
        if assignment is None:
            return
        for task_id in sorted(mine - self._runners.keys() - self._given_up.keys()):
            if now < self._restart_at.get(task_id, 0.0):
                continue
            try:
                task = self._make_task(task_id, assignment)
            except (KeyError, ValueError):
                # The coordinator runs another pipeline than this worker: say so, run nothing.
                reason = f"this worker's pipeline has no stage for task {task_id}"
                log.error("%s (is PROCESSOR_PIPELINE the same everywhere?)", reason)
                self._given_up[task_id] = (reason, 0, "failed")
                continue
            self._runners[task_id] = TaskRunner(task)
            log.info("task %s started on %s", task_id, self.worker_id)

    def _make_task(self, task_id: str, assignment: control.Assignment) -> Task:
        tid = TaskId.parse(task_id)
        stage = self.graph.stage(tid.stage)
        channels = 0
        parallelism = dict(assignment.stages)
        for s in self.graph.stages:
            # An assignment of a coordinator before pipelines only knew the sources' count.
            parallelism.setdefault(s.name, assignment.input_partitions)
        if stage.upstreams:
            channels = self.graph.channels(stage, parallelism)
        ctx = TaskContext(
            settings=self.settings,
            graph=self.graph,
            task_id=task_id,
            worker_id=self.worker_id,
            input_partitions=channels,
            report=self.send,
            stop=threading.Event(),
            purger=None if stage.is_source else self._purgers.get(self.graph.shuffle_topic(stage)),
            feedback_purger=(
                self._purgers.get(self.graph.feedback_topic(stage)) if stage.loop else None
            ),
            parallelism=parallelism,
        )
        if stage.is_source and stage.keyed_source is None:
            return SourceTask(ctx, tid.index, [tid.index])
        if self.queries is not None:
            ctx.query = self.queries.gate(task_id)
        if stage.is_source:  # a keyed source's: it keeps state as a keyed task does
            return KeyedSourceTask(ctx, tid.index)
        return KeyedTask(ctx, tid.index)

    def _heartbeat(self) -> None:
        tasks = {
            t: control.TaskStatus(r.task.state, r.task.last_checkpoint)
            for t, r in self._runners.items()
        }
        for t, (reason, checkpoint, state) in self._given_up.items():
            tasks[t] = control.TaskStatus(state, checkpoint, reason)
        self.send(control.Heartbeat(self.worker_id, self.incarnation, tasks))
        if self.state_url and self._heartbeats % ENDPOINT_EVERY == 0:
            self.send(control.Endpoint(self.worker_id, self.state_url))
        self._heartbeats += 1

    def _stop_all(self) -> None:
        for runner in self._runners.values():
            runner.stop()
        for runner in self._runners.values():
            runner.join(30)
        for purger in self._purgers.values():
            purger.close()
        log.info("worker %s stopped", self.worker_id)
