"""Transactions per minute from the broker's own log: the effective checkpoint/commit interval.

Every system commits its output with Kafka transactions, and each commit writes a control
batch (a transaction marker) into every partition the transaction wrote to. Counting those
batches per producer id in the output's log segments, within a window, gives each
transactional producer's commits per minute, the same way for every system and without
reading a record while it runs (``kafka-dump-log``, ``org.apache.kafka.tools.DumpLogSegments``,
batch headers only, after the run).
"""

from __future__ import annotations

import collections
import re
import shutil
import statistics
import subprocess
from collections.abc import Sequence

from processor.kafka.broker import LocalBroker
from processor.kafka.tools import tools_libs

_CONTROL = re.compile(r"producerId: (\d+) .*isControl: true .*CreateTime: (\d+)")
DUMP_CLASS = "org.apache.kafka.tools.DumpLogSegments"


def control_batches(broker: LocalBroker, topic: str, partition: int) -> list[tuple[int, float]]:
    """(producer id, wall time) of every control batch in the partition's log segments."""
    directory = broker.data_dir / "data" / f"{topic}-{partition}"
    files = sorted(str(f) for f in directory.glob("*.log"))
    if not files:
        return []
    java = shutil.which("java") or "java"
    cmd = [java, "-cp", str(tools_libs(broker.cache_dir) / "*"), DUMP_CLASS, "--files", *files]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    return [(int(m[1]), int(m[2]) / 1000) for m in _CONTROL.finditer(done.stdout)]


def per_minute(batches: Sequence[tuple[int, float]], window: Sequence[float]) -> float | None:
    """The median over producers of their markers per minute inside ``window`` (start, end)
    (producers with none in it are not counted: an idle task is not a slow one)."""
    start, end = window
    if end <= start:
        return None
    counts = collections.Counter(pid for pid, at in batches if start <= at <= end)
    if not counts:
        return None
    return round(statistics.median(counts.values()) * 60 / (end - start), 1)


def commit_markers(
    broker: LocalBroker, topic: str, partition: int, window: Sequence[float] | None
) -> float | None:
    if window is None:
        return None
    return per_minute(control_batches(broker, topic, partition), window)
