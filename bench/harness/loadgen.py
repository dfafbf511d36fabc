"""The live input of bench/capacity.py: a Java producer whose rate the bench changes as it runs.

The earlier live producer (bench/harness/measure.py ``RateProducer``) was one Python process: it
stopped the ladder at 1.13 M words/s, its own limit, not the system's, and took a core doing
so. ``bench/loadgen/LoadGen.java`` sends the same kind of lines (drawn at random, seeded, from
a pool of ``corpus.lines``) from a JVM at a small fraction of that cost, line k into partition
k % partitions, and at the end says how often it sent each pool line, so the exact expected
counts are known without reading the input back.

    gen = LoadGenerator(bootstrap, topic, partitions=4, pool=pool_lines, seed=7)
    gen.start(); gen.set_rate(500_000); ...; expected = gen.stop()
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness.measure import process_cpu_s, words_of
from bench.peers.base import build_jar

PROJECT = Path(__file__).resolve().parents[1] / "loadgen"
JAR = PROJECT / "target" / "loadgen.jar"
HEAP = ("-Xms256m", "-Xmx512m")


@dataclass(frozen=True)
class Sent:
    """One status line: words and records acknowledged by the broker so far (totals), how far
    the sends lagged the rate at worst in the last second, and the rate asked."""

    at: float
    words: int
    records: int
    behind_ms: int
    rate: int


def prepare() -> None:
    build_jar(PROJECT, JAR, "load generator")


class LoadGenerator:
    def __init__(
        self, bootstrap: str, topic: str, partitions: int, pool: Sequence[str], seed: int
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.pool = list(pool)
        self.seed = seed
        self.status: list[Sent] = []
        self.done: str | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="loadgen-"))
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        pool_file = self._dir / "pool.txt"
        pool_file.write_text("".join(line + "\n" for line in self.pool), encoding="utf-8")
        java = shutil.which("java") or "java"
        cmd = [java, *HEAP, "-jar", str(JAR), self.bootstrap, self.topic, str(self.partitions)]
        cmd += [str(pool_file), str(self.seed), str(self._dir / "counts.txt")]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(self._dir / "stderr.log").open("w"),
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="loadgen-status")
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if parts and parts[0] == "SENT" and len(parts) == 6:
                at, words, records, behind, rate = (int(p) for p in parts[1:])
                self.status.append(Sent(at / 1000, words, records, behind, rate))
            elif parts and parts[0] == "DONE":
                self.done = line.strip()

    def set_rate(self, words_per_s: float) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(f"RATE {int(words_per_s)}\n")
        self._proc.stdin.flush()

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid) if self._proc is not None else 0.0

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 120) -> collections.Counter[str]:
        """Stop sending, wait for every record to be acknowledged; the exact word counts of
        everything it sent."""
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write("STOP\n")
            self._proc.stdin.flush()
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        self._proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(10)
        if self.done is None:
            err = (self._dir / "stderr.log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"the load generator ended without DONE: {err}")
        _, _records, _words, errors = self.done.split()
        if int(errors):
            raise RuntimeError(f"the load generator saw {errors} failed sends")
        expected: collections.Counter[str] = collections.Counter()
        for row in (self._dir / "counts.txt").read_text().splitlines():
            index, times = row.split()
            for word in words_of(self.pool[int(index)]):
                expected[word] += int(times)
        return expected

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        shutil.rmtree(self._dir, ignore_errors=True)

    def acked_words_per_s(self, start: float, end: float) -> float | None:
        """The acknowledged words' rate between two wall times (status lines within them)."""
        inside = [s for s in self.status if start <= s.at <= end]
        if len(inside) < 2 or inside[-1].at <= inside[0].at:
            return None
        return (inside[-1].words - inside[0].words) / (inside[-1].at - inside[0].at)

    def max_behind_ms(self, start: float, end: float) -> int:
        return max((s.behind_ms for s in self.status if start <= s.at <= end), default=0)
