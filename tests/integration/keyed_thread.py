"""One keyed task of a job, run in a thread of the test process against the real broker, fed
a shuffle partition that the test writes record by record."""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import Producer

from processor.config import Settings
from processor.jobs.graph import JobGraph
from processor.models import control
from processor.worker.keyed import KeyedTask
from processor.worker.task import TaskContext
from tests.integration.harness import wait_until


class KeyedTaskThread:
    """Task ``task_id`` of ``graph`` on partition 0 of ``topic``, with ``channels`` upstream
    tasks; what it reports (acks, declines) is kept for the test."""

    def __init__(
        self, settings: Settings, graph: JobGraph, task_id: str, topic: str, channels: int
    ) -> None:
        self.settings, self.graph, self.task_id = settings, graph, task_id
        self.topic = topic
        self.channels = channels
        self.acks: list[control.Ack] = []
        self.declines: list[control.Decline] = []
        self._producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 5})
        self._task: KeyedTask | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _send(self, value: bytes, headers: list[tuple[str, str | bytes | None]] | None) -> None:
        """One record into the task's input partition, written at once."""
        self._producer.produce(self.topic, value, partition=0, headers=headers)
        assert self._producer.flush(30) == 0

    def start(self) -> None:
        ctx = TaskContext(
            settings=self.settings,
            graph=self.graph,
            task_id=self.task_id,
            worker_id="test",
            input_partitions=self.channels,
            report=self._report,
            stop=threading.Event(),
        )
        self._task = KeyedTask(ctx, 0)
        self._thread = threading.Thread(target=self._run, args=(self._task,), daemon=True)
        self._thread.start()

    def _run(self, task: KeyedTask) -> None:
        try:
            task.run()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc

    def _report(self, message: control.Message) -> None:
        if isinstance(message, control.Ack):
            self.acks.append(message)
        elif isinstance(message, control.Decline):
            self.declines.append(message)

    def wait_for(self, done: Callable[[KeyedTask], bool], what: str, timeout: float = 60) -> None:
        """Until ``done(task)``: a look at the running task (its consumer is busy in its
        own thread); fails at once if the task failed."""

        def check() -> bool:
            if self.error is not None:
                raise AssertionError(f"the task failed: {self.error!r}")
            return self._task is not None and done(self._task)

        wait_until(check, timeout, what)

    def wait_for_ack(self, checkpoint_id: int, timeout: float = 60) -> control.Ack:
        self.wait_for(
            lambda _: any(a.checkpoint == checkpoint_id for a in self.acks),
            f"the ack of checkpoint {checkpoint_id}",
            timeout,
        )
        return next(a for a in self.acks if a.checkpoint == checkpoint_id)

    def wait_for_decline(self, checkpoint_id: int, timeout: float = 60) -> None:
        self.wait_for(
            lambda _: any(d.checkpoint == checkpoint_id for d in self.declines),
            f"the decline of checkpoint {checkpoint_id}",
            timeout,
        )

    def stop(self) -> None:
        if self._task is not None and self._thread is not None:
            self._task.ctx.stop.set()
            self._thread.join(60)
            assert not self._thread.is_alive()
        self._task = self._thread = None
