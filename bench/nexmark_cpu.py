"""What bench/nexmark.py records beside the rates: CPU seconds of processes from /proc over
a run's window, the machine, its load.

A `CpuSampler` samples, every ``interval`` s, the CPU seconds of the process trees under its
roots: per live process utime + stime + cutime + cstime (a child reaped by a parent in the
tree moves into the parent's cutime, so the sum never drops while the roots live). The CPU in
a window [start, end] is the difference of the samples interpolated at its ends.
"""

from __future__ import annotations

import itertools
import os
import platform
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.common import children_cpu_s
from bench.peers.base import Running

_TICK = os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    """The machine a sitting ran on: figures from different ones are never joined."""
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    total_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total_kb = int(line.split()[1])
    return {
        "host": platform.node(),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem_total_mb": total_kb // 1024,
        "kernel": platform.release(),
    }


def load_1m() -> float:
    """The 1-minute load average now."""
    return round(os.getloadavg()[0], 2)


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime + stime + cutime + cstime in seconds); None for a zombie or none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / _TICK


def tree_cpu_s(roots: Sequence[int]) -> float:
    """CPU seconds of the live process trees under ``roots`` (their reaped children too)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            stats[int(entry)] = stat
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [r for r in roots if r in stats]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


class CpuSampler(threading.Thread):
    """The CPU of the trees under ``roots`` over time; `cpu_between` a window's share."""

    def __init__(self, roots: Sequence[int], interval: float = 0.25) -> None:
        super().__init__(daemon=True, name="nexmark-cpu")
        self.roots = list(roots)
        self.interval = interval
        self.timeline: list[tuple[float, float]] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.sample()

    def sample(self) -> None:
        cpu = tree_cpu_s(self.roots)
        with self._lock:
            if self.timeline:
                cpu = max(cpu, self.timeline[-1][1])  # a tree that exited keeps its last
            self.timeline.append((time.time(), cpu))

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.sample()

    def cpu_at(self, when: float) -> float:
        """CPU seconds at wall time ``when``, interpolated between samples."""
        with self._lock:
            points = list(self.timeline)
        if when <= points[0][0]:
            return points[0][1]
        for (t0, c0), (t1, c1) in itertools.pairwise(points):
            if t0 <= when <= t1:
                return c0 + (c1 - c0) * (when - t0) / (t1 - t0 or 1)
        return points[-1][1]

    def cpu_between(self, start: float, end: float) -> float:
        return round(self.cpu_at(end) - self.cpu_at(start), 3)


@dataclass
class Watched:
    """A job watched to its exit: whether it ended by itself, when, its CPU sampler, and its
    whole tree's CPU (startup and exit included): the larger of the reaped children's and
    the last sample's."""

    finished: bool
    ended: float
    tree: CpuSampler
    reaped_cpu_s: float

    @property
    def total_cpu_s(self) -> float:
        return max(self.reaped_cpu_s, self.tree.cpu_at(self.ended))


def watch_exit(running: Running, timeout: float) -> Watched:
    """Samples ``running``'s process trees until they exit by themselves (or ``timeout``),
    then stops them. The whole tree's CPU exactly: the harness reaps the roots, the roots
    their children (the samples of /proc miss the last interval before the exit)."""
    reaped = children_cpu_s()
    tree = CpuSampler(running.roots)
    tree.start()
    try:
        finished = running.wait(timeout)
        ended = time.time()
    finally:
        tree.stop()
        running.stop()
    return Watched(finished, ended, tree, children_cpu_s() - reaped)
