"""The live input of the Nexmark live phases (bench/nexmark_live.py): the crate's events
replayed from a file by a JVM (``bench/loadgen/.../NexmarkReplay.java``, kafka-clients, the
load generator's jar) at a rate the bench changes as it runs.

The file is ``nexmark --no-wait --number N``'s output, generated once per sitting
(`generate_file`). Line i (empty lines do not count) goes to partition ``(i // block) %
partitions``, at offset `placement` gives: blocks of consecutive lines round robin, as
`processor nexmark generate` loads them, each partition in the file's (event-time) order.
A run sends a prefix of the file (as far as the rate took it), then one closing event per
partition (`processor.commands.nexmark.closing_event`, 60 s of event time after the last
event sent): the expected output is the definitions' over exactly those events
(bench/nexmark_expect.py).

At the end the replayer hands over when the broker acknowledged every record (`AckLog`): the
latency of an output row is measured from the acknowledgement of the input it depends on.

    replay = Replayer(bootstrap, topic, 4, events_file, workdir)
    replay.start(); replay.set_rate(20_000); ...; sent = replay.stop()
    acks = replay.close(closing_line)
"""

from __future__ import annotations

import bisect
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.harness.loadgen import JAR
from bench.harness.loadgen import prepare as prepare  # the jar NexmarkReplay is in
from bench.harness.measure import process_cpu_s

MAIN = "bench.NexmarkReplay"
BLOCK = 256  # lines a block: some 25 ms of the crate's event time, as a pipe read's 230
HEAP = ("-Xms128m", "-Xmx512m")


def generate_file(binary: Path, events: int, path: Path) -> float:
    """``nexmark --no-wait --number events`` into ``path``; the seconds it took."""
    started = time.perf_counter()
    with path.open("wb") as out:
        done = subprocess.run(
            [str(binary), "--no-wait", "--number", str(events)],
            stdout=out,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{binary} exited with {done.returncode}")
    return time.perf_counter() - started


def lines(path: Path, count: int) -> Iterator[bytes]:
    """The first ``count`` lines of the events file, as the replayer counts them."""
    if count <= 0:
        return
    seen = 0
    with path.open("rb") as file:
        for raw in file:
            line = raw.rstrip(b"\r\n")
            if not line:
                continue
            yield line
            seen += 1
            if seen >= count:
                return


def placement(index: int, partitions: int, block: int = BLOCK) -> tuple[int, int]:
    """(partition, offset) of the file's line ``index`` in the topic: its block round robin,
    the blocks before it in that partition, then its place in its block."""
    number, within = divmod(index, block)
    return number % partitions, (number // partitions) * block + within


def check_placement(bootstrap: str, topic: str, tails: dict[int, tuple[int, bytes]]) -> None:
    """Each partition's record at the offset `placement` gave the last line sent to it is that
    line (the replayer and the bench agree on where every line went: the latency's input
    events are found by it); raises RuntimeError if not."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"nexmark-placement-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        for partition, (offset, line) in sorted(tails.items()):
            consumer.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + 30
            msg = None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None or msg.offset() != offset:
                raise RuntimeError(f"{topic}[{partition}]@{offset}: not read back")
            if msg.value() != line:
                raise RuntimeError(f"{topic}[{partition}]@{offset} is not the line placed there")
    finally:
        consumer.close()


class AckLog:
    """When the broker acknowledged each record: per partition, change points (offset, epoch
    s) sorted by offset; a record's time is its last change point's at or before it."""

    def __init__(self, points: dict[int, list[tuple[int, float]]]) -> None:
        self.offsets: dict[int, list[int]] = {}
        self.times: dict[int, list[float]] = {}
        for partition, pairs in points.items():
            ordered = sorted(pairs)
            self.offsets[partition] = [o for o, _ in ordered]
            self.times[partition] = [t for _, t in ordered]

    @classmethod
    def parse(cls, text: str) -> AckLog:
        points: dict[int, list[tuple[int, float]]] = {}
        for row in text.splitlines():
            partition, offset, ms = (int(f) for f in row.split())
            points.setdefault(partition, []).append((offset, ms / 1000))
        return cls(points)

    def at(self, partition: int, offset: int) -> float | None:
        """The wall time (s) the record at ``offset`` was acknowledged; None if unknown."""
        offsets = self.offsets.get(partition)
        if not offsets:
            return None
        i = bisect.bisect_right(offsets, offset) - 1
        return self.times[partition][i] if i >= 0 else None


@dataclass(frozen=True)
class Sent:
    """One status line: lines acknowledged and sent so far, how far the sends lagged the rate
    at worst in the last second (ms), the rate asked (events/s)."""

    at: float
    acked: int
    sent: int
    behind_ms: int
    rate: int


class Replayer:
    """One NexmarkReplay process: ``start``, ``set_rate`` (any number of times), ``stop`` (the
    lines sent), ``close`` (the closing event to every partition; the `AckLog`)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        events_file: Path,
        workdir: Path,
        block: int = BLOCK,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.events_file = events_file
        self.block = block
        self.dir = workdir
        self.status: list[Sent] = []
        self.exhausted_at: int | None = None  # lines, when the file ran out
        self.stopped: int | None = None
        self.done: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        java = shutil.which("java") or "java"
        cmd = [java, *HEAP, "-cp", str(JAR), MAIN, self.bootstrap, self.topic]
        cmd += [str(self.partitions), str(self.block), str(self.events_file)]
        cmd.append(str(self.dir / "acks.txt"))
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(self.dir / "replay.log").open("w"),
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="nexmark-replay")
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if not parts:
                continue
            with self._changed:
                if parts[0] == "SENT" and len(parts) == 6:
                    at, acked, sent, behind, rate = (int(p) for p in parts[1:])
                    self.status.append(Sent(at / 1000, acked, sent, behind, rate))
                elif parts[0] == "END":
                    self.exhausted_at = int(parts[1])
                elif parts[0] == "STOPPED":
                    self.stopped = int(parts[1])
                elif parts[0] == "DONE":
                    self.done = line.strip()
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _command(self, text: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(text + "\n")
        self._proc.stdin.flush()

    def set_rate(self, events_per_s: float) -> None:
        self._command(f"RATE {int(events_per_s)}")

    def _wait_for(self, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while getattr(self, what) is None:
                left = deadline - time.monotonic()
                if left <= 0 or (self._proc is not None and self._proc.poll() is not None):
                    break
                self._changed.wait(min(left, 1.0))
        if getattr(self, what) is None:
            log = (self.dir / "replay.log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"the replayer did not say {what.upper()}: {log}")

    def stop(self, timeout: float = 120) -> int:
        """Stops the replay of the file; once every line sent is acknowledged, how many."""
        self._command("STOP")
        self._wait_for("stopped", timeout)
        assert self.stopped is not None
        return self.stopped

    def close(self, closing: bytes, timeout: float = 120) -> AckLog:
        """The closing event to every partition; then the acknowledgements of the whole run."""
        self._command("CLOSE " + closing.decode())
        assert self._proc is not None
        self._wait_for("done", timeout)
        self._proc.wait(30)
        assert self.done is not None
        _, _lines, _closing, errors = self.done.split()
        if int(errors):
            raise RuntimeError(f"the replayer saw {errors} failed sends")
        return AckLog.parse((self.dir / "acks.txt").read_text())

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid) if self._proc is not None else 0.0

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    def acked_per_s(self, start: float, end: float) -> float | None:
        """The acknowledged lines' rate between two wall times (status lines within them)."""
        inside = [s for s in self.status if start <= s.at <= end]
        if len(inside) < 2 or inside[-1].at <= inside[0].at:
            return None
        return (inside[-1].acked - inside[0].acked) / (inside[-1].at - inside[0].at)

    def max_behind_ms(self, start: float, end: float) -> int:
        return max((s.behind_ms for s in self.status if start <= s.at <= end), default=0)
