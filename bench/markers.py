"""Transactions per minute from the broker's own log: the effective checkpoint/commit interval.

Every system commits its output with Kafka transactions, and each commit writes a control
batch (a transaction marker) into every partition the transaction wrote to. Counting those
batches in the output's log segments within a window, per partition and per transactional
writer (``Peer.output_writers``: this project's keyed tasks, Kafka Streams' stream threads,
Flink's sink subtasks, Quix's processes), gives each writer's commits per minute, the same
way for every system and without reading a record while it runs (``kafka-dump-log``,
``org.apache.kafka.tools.DumpLogSegments``, batch headers only, after the run).

Per writer, not per producer id: Flink's sink takes a new transactional id (so a new producer
id) for every checkpoint, so a producer id commits once.
"""

from __future__ import annotations

import re
import shutil
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


def per_minute(
    batches: Sequence[tuple[int, float]], window: Sequence[float], writers: int
) -> float | None:
    """Markers inside ``window`` (start, end) per minute and writer, on one partition."""
    start, end = window
    if end <= start or writers < 1:
        return None
    inside = sum(1 for _, at in batches if start <= at <= end)
    if not inside:
        return None
    return round(inside * 60 / (end - start) / writers, 1)


def commit_markers(
    broker: LocalBroker,
    topic: str,
    partitions: int,
    writers: int,
    window: Sequence[float] | None,
) -> float | None:
    """Commits per minute and writer over ``window``: the median over the topic's partitions
    (a writer's transaction marks every partition it wrote to; at a capacity's rate each one
    writes to every partition)."""
    if window is None:
        return None
    rates = [
        r
        for p in range(partitions)
        if (r := per_minute(control_batches(broker, topic, p), window, writers)) is not None
    ]
    return sorted(rates)[len(rates) // 2] if rates else None
