"""Runs a job as real processes (coordinator + workers) against the test broker."""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from processor.commands import corpus
from processor.commands.counts import read_updates
from processor.config import Settings, load_settings
from processor.jobs.wordcount import words
from processor.kafka import clients
from processor.kafka.replication import topic_replication
from processor.models import control
from processor.state.rocksdb.snapshots import unseal_manifest
from processor.worker.task import committed_after_fencing

T = TypeVar("T")

# Of a stack dump in a test's failure: enough for every thread of a worker.
_MAX_DUMP_LINES = 600


class JobRun:
    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        input_partitions: int = 4,
        interval_ms: int = 500,
        **settings: str,
    ) -> None:
        self.job = f"it-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        topics, storage = self._shared_with()
        # A pipeline (settings["pipeline"]) reads its own source topic: pass it as input_topic.
        input_topic = settings.get("input_topic", f"{topics}.input")
        self.env = {
            **os.environ,
            "PROCESSOR_BOOTSTRAP_SERVERS": bootstrap,
            "PROCESSOR_JOB_NAME": self.job,
            "PROCESSOR_INPUT_TOPIC": input_topic,
            "PROCESSOR_OUTPUT_TOPIC": f"{topics}.counts",
            "PROCESSOR_STATE_DIR": str(workdir / "state"),
            "PROCESSOR_CHECKPOINT_DIR": str(storage / "checkpoints"),
            "PROCESSOR_CHECKPOINT_INTERVAL_MS": str(interval_ms),
            "PROCESSOR_HEARTBEAT_INTERVAL_MS": "200",
            "PROCESSOR_WORKER_TIMEOUT_MS": "2000",
            **{f"PROCESSOR_{k.upper()}": v for k, v in settings.items()},
        }
        self.settings: Settings = load_settings(
            bootstrap_servers=bootstrap,
            job_name=self.job,
            input_topic=input_topic,
            output_topic=f"{topics}.counts",
        )
        if input_partitions:  # 0: a pipeline's run, which has source topics of its own
            # As many copies as the job's own topics get: on a cluster the input must
            # survive a broker fault too.
            admin = clients.admin(self.settings)
            clients.ensure_topic(
                admin,
                self.settings.input_topic,
                input_partitions,
                replication=topic_replication(self.settings, admin),
            )
        self.expected: collections.Counter[str] = self._expected()
        self.coordinator: subprocess.Popen[bytes] | None = None
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        # Per worker index: a command prefix to start it under, e.g. ``ip netns exec <ns>``
        # to run it inside a network namespace (tests/netns.py). That execs the worker, so
        # the pid in ``workers`` is still the worker's own and kill_worker's signals reach it.
        self.worker_prefix: dict[int, list[str]] = {}
        # Settings of the workers only, over ``env``: e.g. their own Kafka principal's login.
        self.worker_env: dict[str, str] = {}
        self._feeder: threading.Thread | None = None
        self.halfway = threading.Event()  # a feed that holds half-way has got there
        self._resume = threading.Event()
        self._hurry = threading.Event()
        self._feed_error: BaseException | None = None
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10}
        )

    def _shared_with(self) -> tuple[str, Path]:
        """The job whose topics this one uses, and the directory of its checkpoint storage."""
        return self.job, self.workdir

    def _expected(self) -> collections.Counter[str]:
        return collections.Counter()

    # --- input ---------------------------------------------------------------------------

    def produce(
        self,
        values: Iterable[bytes | None],
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        """Append records to the input; valid UTF-8 lines count towards the expected result."""
        values = list(values)
        for value in values:
            if value:
                with contextlib.suppress(UnicodeDecodeError):
                    self.expected.update(words([value.decode()]))
        self.send(self.settings.input_topic, values, headers)

    def send(
        self,
        topic: str,
        values: Iterable[bytes | None],
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        """Append records to ``topic``, all flushed on return."""
        for value in values:
            self._produce(topic, value, headers=headers)
        self._flush()

    def send_placed(self, records: Iterable[tuple[str, bytes, int, int | None]]) -> None:
        """Append ``(topic, value, partition, timestamp ms or None for now)`` records, all
        flushed on return."""
        for topic, value, partition, timestamp in records:
            self._produce(topic, value, partition=partition, timestamp=timestamp or 0)
        self._flush()

    def _produce(self, topic: str, value: bytes | None, **kwargs: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value, **kwargs)
                return
            except BufferError:
                self._producer.poll(0.05)

    def _flush(self) -> None:
        # Long enough to outlast a broker restart (a chaos fault): the queued records wait
        # in the idempotent producer and go out, once each, when it is back.
        assert self._producer.flush(180) == 0, "input records still unsent after 180 s"

    def feed(self, words: int, seconds: float, seed: int = 11) -> None:
        """Produce a corpus in the background, spread over ``seconds``: kills land mid-stream."""
        lines = [line.encode() for line in corpus.lines(words, seed=seed)]
        self.feed_values(lines, seconds, self.produce)

    def feed_values(
        self,
        values: Sequence[T],
        seconds: float,
        send: Callable[[list[T]], None],
        hold_halfway: bool = False,
    ) -> None:
        """``send`` ``values`` in chunks in the background, spread over ``seconds``. With
        ``hold_halfway`` the feed sets `halfway` there and waits for `resume_feed`: what a
        test does then happens while half of the input is still to come."""
        chunks = max(20, int(seconds / 0.5))  # gaps well under the idle detection's 3 checkpoints
        size = len(values) // chunks + 1
        hurry = self._hurry = threading.Event()  # this feed's: a later one is paced again

        def run() -> None:
            try:
                for i in range(chunks):
                    if hold_halfway and i == chunks // 2:
                        self.halfway.set()
                        self._resume.wait(300)
                    send(list(values[i * size : (i + 1) * size]))
                    hurry.wait(seconds / chunks)  # set: the rest at once
            except BaseException as exc:  # noqa: BLE001 - raised again by drain()
                self._feed_error = exc

        self._feeder = threading.Thread(target=run, daemon=True)
        self._feeder.start()

    @property
    def feeding(self) -> bool:
        """Whether the background feed is still sending."""
        return self._feeder is not None and self._feeder.is_alive()

    def resume_feed(self) -> None:
        self._resume.set()

    def feed_finished(self) -> bool:
        """Whether every chunk of the feed has been sent (or there was none)."""
        return self._feeder is None or not self._feeder.is_alive()

    def hurry_feed(self) -> None:
        """Send what is left of the feed without its pauses (a chaos run whose faults ended
        before the feed's planned span)."""
        self._hurry.set()

    def finish(self, timeout: float = 400) -> int:
        """Wait for the feed and for the job to be idle; verify; return records verified."""
        self.drain(timeout)
        return self.verify_exactly_once()

    def drain(self, timeout: float = 400) -> None:
        """Wait for the feed and for the job to be idle (every input committed)."""
        if self._feeder is not None:
            # A test's faults all come before it drains: the rest of the input needs no
            # pauses (they only spread it for the faults to land mid-stream).
            self.hurry_feed()
            self._feeder.join(300)
            assert not self._feeder.is_alive(), "the input feed did not finish"
            if self._feed_error is not None:
                # Verifying against input that was never written would report it lost.
                raise AssertionError(f"the input feed failed: {self._feed_error!r}")
        if self.coordinator is not None and self.coordinator.poll() == 0:
            # It saw the job idle during a pause of the feed and left: the rest needs one.
            self.start_coordinator()
        self.wait_idle(timeout)

    # --- processes -----------------------------------------------------------------------

    def _spawn(
        self, name: str, *args: str, prefix: Sequence[str] = (), **env: str
    ) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "processor", *args],
            env={**self.env, **env},
            stdout=log,
            stderr=log,
        )

    def start_coordinator(
        self,
        exit_when_idle: bool = True,
        fault: str = "",
        metrics_port: int = 0,
        drain: bool = False,
    ) -> None:
        """``fault`` arms a crash point (processor/faults.py) in this process only;
        ``metrics_port`` (0: as the run's environment says) serves its HTTP side; ``drain``
        ends event time once idle (``--drain``)."""
        args = ["coordinator", *(["--exit-when-idle"] if exit_when_idle else [])]
        args += ["--drain"] if drain else []
        port = {"PROCESSOR_METRICS_PORT": str(metrics_port)} if metrics_port else {}
        self.coordinator = self._spawn("coordinator", *args, PROCESSOR_FAULT=fault, **port)

    def start_worker(self, index: int, metrics_port: int = 0, fault: str = "") -> None:
        self.workers[index] = self._spawn(
            f"worker-{index}",
            "worker",
            "--worker-id",
            f"worker-{index}",
            prefix=self.worker_prefix.get(index, ()),
            **self.worker_env,
            PROCESSOR_METRICS_PORT=str(metrics_port),
            PROCESSOR_FAULT=fault,
        )

    def start(self, workers: int) -> None:
        """The coordinator (leaving when the job is idle) and ``workers`` workers."""
        self.start_coordinator()
        for i in range(workers):
            self.start_worker(i)

    def dead_workers(self) -> list[int]:
        return [i for i, proc in self.workers.items() if proc.poll() is not None]

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        proc = self.workers[index]
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait(10)

    def kill_coordinator(self) -> None:
        assert self.coordinator is not None
        self.coordinator.kill()
        self.coordinator.wait(10)

    def wait_idle(self, timeout: float = 300) -> None:
        """Until the coordinator saw every input consumed and committed (it then exits 0)."""
        assert self.coordinator is not None
        try:
            code = self.coordinator.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"job not idle after {timeout}s; logs in {self.workdir}\n"
                f"{self.stacks('coordinator', self.coordinator)}\n{self.log_tails()}"
            ) from None
        assert code == 0, f"coordinator exited with {code}; logs in {self.workdir}"

    def stop(self) -> None:
        procs = [p for p in [self.coordinator, *self.workers.values()] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def completed_checkpoints(self) -> int:
        return self.log("coordinator").count(" complete in ")

    def wait_for_checkpoints(self, more: int, timeout: float = 60) -> None:
        """Until ``more`` further checkpoints completed: the job has committed progress."""
        target = self.completed_checkpoints() + more

        def reached() -> bool:
            if self.coordinator is not None and self.coordinator.poll() == 0:
                # It saw the job idle and left (the feed slow to start on a loaded machine,
                # or paused): checkpoints need one again, as in `drain`.
                self.start_coordinator()
            return self.completed_checkpoints() >= target

        try:
            wait_until(reached, timeout, f"{more} checkpoints")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; logs in {self.workdir}\n{self.log_tails()}") from None

    def stacks(self, name: str, proc: subprocess.Popen[bytes], before: int = 20) -> str:
        """Process ``name``'s threads' stacks, dumped into its log now (SIGUSR1, see
        `processor.logs`), after the ``before`` log lines that preceded the dump: what a
        process that hung on CI was doing (its directory is gone with the machine)."""
        if proc.poll() is not None:
            return f"--- {name} exited with {proc.returncode}"
        start = len(self.log(name).splitlines())
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        lines = self.log(name).splitlines()[max(0, start - before) :]
        return f"--- {name}.log, then its stacks\n" + "\n".join(lines[:_MAX_DUMP_LINES])

    def log_tails(self, lines: int = 12) -> str:
        """The last ``lines`` lines of the coordinator's and each worker's log: what a test
        that timed out on CI shows of the job (its directory is gone with the machine)."""
        names = ["coordinator", *(f"worker-{i}" for i in sorted(self.workers))]
        return "\n".join(
            f"--- {name}.log\n" + "\n".join(self.log(name).splitlines()[-lines:]) for name in names
        )

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # --- verification --------------------------------------------------------------------

    def verify_exactly_once(self) -> int:
        """The Kafka EOS-test invariants on the committed output; returns records verified.

        Per word: values strictly increasing (no duplicate or lost update can hide) and the last
        one equal to the exact count; no unknown word; the read reaches the high watermark of
        every partition (read_updates raises otherwise), so no transaction is left open.
        """
        final, updates = read_updates(self.settings, self.settings.output_topic, timeout=60)
        unknown = final.keys() - self.expected.keys()
        assert not unknown, f"words nobody wrote: {sorted(unknown)[:5]}"
        missing = self.expected.keys() - final.keys()
        assert not missing, f"words without output: {sorted(missing)[:5]}"
        bad = [w for w, v in updates.items() if any(a >= b for a, b in itertools.pairwise(v))]
        assert not bad, f"{len(bad)} of {len(updates)} words: " + " | ".join(
            f"{_not_increasing(w, updates[w])}, final {updates[w][-1]}, exact {self.expected[w]}"
            for w in bad[:3]
        )
        for word, values in updates.items():
            assert values[-1] == self.expected[word], (
                f"{word}: final {values[-1]} != exact {self.expected[word]}"
            )
        return sum(len(v) for v in updates.values())

    def committed_manifest(self, stage: str, partition: int) -> Path | None:
        """The manifest of the snapshot keyed task ``<stage>-<partition>`` last committed (its
        shuffle is ``<job>.<stage>``; local storage), None before its first commit. Removing
        it makes the task's next restore fall back to an older snapshot."""
        tp = TopicPartition(f"{self.job}.{stage}", partition)
        (committed,) = committed_after_fencing(self.settings, [tp])
        try:
            meta = json.loads(committed.metadata or "{}")
            chk = f"chk-{int(meta['checkpoint']):012d}"
        except (ValueError, KeyError, TypeError):
            return None
        task_dir = self.workdir / "checkpoints" / self.job / f"{stage}-{partition}"
        manifest = task_dir / str(meta["snapshot"]) / chk / "_snapshot.json"
        return manifest if manifest.exists() else None

    def snapshot_manifests(self) -> list[dict[str, object]]:
        root = self.workdir / "checkpoints" / self.job
        paths = sorted(root.glob("*/*/chk-*/_snapshot.json"))
        return [unseal_manifest(path.read_bytes()) for path in paths]


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


ControlLog = list[tuple[float, control.Message]]


def control_messages(run: JobRun) -> ControlLog:
    """Every message on the job's control topic, with its Kafka timestamp (seconds)."""
    consumer = clients.consumer(run.settings, **{"group.id": f"{run.job}.inspect"})
    tp = TopicPartition(run.settings.control_topic, 0)
    _, high = clients.watermark_offsets(consumer, tp)
    consumer.assign([TopicPartition(tp.topic, 0, OFFSET_BEGINNING)])
    out: ControlLog = []
    position = 0
    try:
        # Ends by the consumer's position, not by the offsets of the records read: the
        # coordinator's lease is renewed in transactions, and their markers (never returned)
        # can be the last offsets of the topic.
        while position < high:
            for msg in consumer.consume(10_000, 1.0):
                message = control.decode(msg.value() or b"")
                if message is not None:
                    out.append((msg.timestamp()[1] / 1000, message))
            position = consumer.position([tp])[0].offset
    finally:
        consumer.close()
    return out


def recovery_times(messages: ControlLog, kills: list[tuple[float, str]]) -> list[float]:
    """Per kill of a worker: until every task it ran had committed again (its acks)."""
    times = []
    for killed_at, worker in kills:
        before = [m for ts, m in messages if isinstance(m, control.Assignment) and ts < killed_at]
        if not before:
            continue
        tasks = {t for t, w in before[-1].tasks.items() if w == worker}
        first: dict[str, float] = {}
        for ts, m in messages:
            if isinstance(m, control.Ack) and ts > killed_at and m.task in tasks:
                first.setdefault(m.task, ts)
        if tasks and first.keys() == tasks:
            times.append(max(first.values()) - killed_at)
    return times


class SuccessorRun(JobRun):
    """A job on the input, output and checkpoint storage of ``first`` (a job started from its
    savepoint): the counts expected of it are ``first``'s plus its own input."""

    def __init__(self, first: JobRun, workdir: Path, interval_ms: int = 500, **settings: str):
        self.first = first
        super().__init__(first.settings.bootstrap_servers, workdir, 4, interval_ms, **settings)

    def _shared_with(self) -> tuple[str, Path]:
        return self.first.job, self.first.workdir

    def _expected(self) -> collections.Counter[str]:
        return self.first.expected


def _not_increasing(word: str, values: list[int]) -> str:
    """Where a word's updates stop increasing: each break with the values around it, and how
    many there are (a duplicate update repeats a value; a replay from too early goes back)."""
    breaks = [i for i in range(1, len(values)) if values[i] <= values[i - 1]]
    shown = "; ".join(
        f"at update {i} of {len(values)}: {values[max(0, i - 3) : i + 3]}" for i in breaks[:5]
    )
    repeats = sum(values[i] == values[i - 1] for i in breaks)
    head = f"{word}: values not strictly increasing, {len(breaks)} breaks ({repeats} repeats)"
    return f"{head}: {shown}"
