"""The interface every system under test implements, and its process handling.

A peer is prepared once (build, install: not timed), then started on a ``Job`` any number of
times. Every process a peer starts is the leader of a new process group, so that ``stop``
can end whatever it left behind and prove that nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bench.harness.measure import pgroup_members


@dataclass(frozen=True)
class Job:
    """One word-count run: read ``input_topic`` from the beginning, write ``output_topic``."""

    bootstrap: str
    name: str  # unique per run: job name, application.id, consumer group
    input_topic: str
    output_topic: str
    workdir: Path  # logs, local state, checkpoints
    interval_ms: int = 1000  # checkpoint / commit interval
    parallelism: int = 2  # workers, stream threads, processes
    until_idle: bool = False  # exit by itself once the input is done (where supported)


class Running:
    """The processes of one started job."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path]) -> None:
        self.procs = list(procs)
        self.logs = list(logs)
        self.started_at = time.time()

    @property
    def roots(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(self, timeout: float) -> bool:
        """Until every root process exited by itself; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return True
            time.sleep(0.05)
        return False

    def exit_codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def stop(self, timeout: float = 40) -> list[int]:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; then nothing may be left in
        the process groups. Returns the pids that had to be killed."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        killed: list[int] = []
        for proc in self.procs:
            members = pgroup_members(proc.pid)
            if members:
                killed += members
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        time.sleep(0.2 if killed else 0)
        left = [pid for proc in self.procs for pid in pgroup_members(proc.pid)]
        if left:
            raise RuntimeError(f"processes survived SIGKILL: {left}")
        return killed

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())


_FIRST_RECORD = re.compile(r"^FIRST_RECORD (\d+)$", re.MULTILINE)


def build_jar(project: Path, jar: Path, what: str) -> None:
    """``mvn package`` in ``project`` unless ``jar`` is newer than its sources (the JVM peers
    are Maven projects that print ``FIRST_RECORD <epoch ms>``)."""
    sources = [project / "pom.xml", *project.glob("src/**/*")]
    if jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in sources):
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"mvn not found: Maven builds the {what} peer")
    done = subprocess.run(
        [mvn, "-q", "-B", "-Dstyle.color=never", "package"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0 or not jar.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"building {project} failed: {' | '.join(tail)}")


def run_jar(
    jar: Path,
    jvm: Sequence[str],
    job: Job,
    state: str,
    log_name: str,
    extra: Sequence[str] = (),
    main_class: str | None = None,
) -> Running:
    """A JVM peer's word count: ``java <jvm> -jar <jar> bootstrap input output name state
    parallelism interval <extra>`` (``-cp <jar> <main_class>`` for another program of the
    jar), one process."""
    java = shutil.which("java") or "java"
    program = ["-cp", str(jar), main_class] if main_class else ["-jar", str(jar)]
    cmd = [java, *jvm, *program, job.bootstrap, job.input_topic, job.output_topic]
    cmd += [job.name, str(job.workdir / state), str(job.parallelism), str(job.interval_ms)]
    log = job.workdir / log_name
    return Running([spawn([*cmd, *extra], log)], [log])


def first_record_at(log_text: str) -> float | None:
    """The earliest ``FIRST_RECORD <epoch ms>`` line of a JVM peer's log, in seconds."""
    stamps = [int(m) / 1000 for m in _FIRST_RECORD.findall(log_text)]
    return min(stamps) if stamps else None


def spawn(
    cmd: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """A process in a new session (its own process group), stdout and stderr into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(cmd),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class Peer(ABC):
    """A word-count system under test."""

    name: ClassVar[str]  # key in the report, prefix of its topics
    title: ClassVar[str]  # for people
    # False: it writes no output topic (the ceiling); only the steady-state phase runs it.
    has_output: ClassVar[bool] = True

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Build or install what ``start`` needs (not timed); idempotent."""

    @abstractmethod
    def start(self, job: Job) -> Running:
        """Start the job's processes and return at once."""

    def first_consumed_at(self, running: Running) -> float | None:
        """Wall time at which the job began consuming input (from its logs), if known: by
        default its ``FIRST_RECORD <epoch ms>`` line."""
        return first_record_at(running.log_text())

    def group_id(self, job: Job) -> str:
        """The consumer group whose committed offsets of the input topic are the job's
        progress (bench/harness/steady.py measures throughput from them): for every peer so far the
        job's name (job name, application.id, consumer group)."""
        return job.name

    def output_writers(self, job: Job) -> int | None:
        """How many transactional writers commit to each partition of the job's output
        (bench/harness/markers.py counts commits per writer), or None (the default) if each writer
        keeps one producer id for the run, so that the markers' producer ids tell them apart
        (this project's keyed tasks, Kafka Streams' stream threads, Quix's processes)."""
        return None

    @abstractmethod
    def settings(self) -> dict[str, object]:
        """What the report should say about how the system was configured."""
