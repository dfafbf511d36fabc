"""Helpers every bench script shares (defined once: bench/README's rule)."""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


def say(text: str) -> None:
    """A progress line on stderr, with the time: stdout stays for results."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def own_cpu_s() -> float:
    """CPU seconds of this process so far (the harness: producer, watcher, sampler), which a
    result reports as the harness's own cost."""
    times = os.times()
    return times.user + times.system


def children_cpu_s() -> float:
    """CPU seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds to 0.1 ms, None as None (a percentile of nothing)."""
    return None if seconds is None else round(1000 * seconds, 1)


def machine() -> dict[str, object]:
    """What a figure was measured on: sittings on different machines are never joined into
    one median (issue #42), and every report says its machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return {"cores": cores(), "cpu": cpu, "memory_gib": round(memory_kib / 2**20)}


def cores() -> int:
    """The machine's cores: what "share of the machine" is a share of."""
    return os.cpu_count() or 1


def every(
    interval: float,
    halt: threading.Event,
    step: Callable[[], object],
    on_error: Callable[[BaseException], None],
) -> None:
    """``step()`` every ``interval`` s (on a fixed schedule) until ``halt`` is set; an error is
    handed to ``on_error`` and sampling goes on (a transient admin error)."""
    next_at = time.monotonic()
    while not halt.is_set():
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported, and the next sample may work
            on_error(exc)
        next_at += interval
        halt.wait(max(0.0, next_at - time.monotonic()))
