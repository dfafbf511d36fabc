"""Transactions per minute from the broker's own log: the effective checkpoint/commit interval.

Every system commits its output with Kafka transactions, and each commit writes a control
batch (a transaction marker) into every partition the transaction wrote to. Counting those
batches in the output's log segments within a window, per partition and per transactional
writer (below), gives each writer's commits per minute, the same way for every system and
without reading a record while it runs (``kafka-dump-log``,
``org.apache.kafka.tools.DumpLogSegments``, batch headers only, after the run).

Who writes to a partition depends on how keys meet partitions, so it is counted, not assumed.
A writer that keeps its producer id for the run (this project's keyed tasks, Kafka Streams'
stream threads, Quix's processes) is one producer id: its markers on a partition are its
commits, whether every writer writes to every partition (this project: crc32 shuffle, murmur2
output) or one (Kafka Streams: murmur2 both, a task's output lands in its own partition).
Flink's sink takes a new transactional id (so a new producer id) for every checkpoint, so a
producer id commits once: there the markers on a partition are divided by the number of sink
subtasks (``Peer.output_writers``), each of which writes to every partition.
"""

from __future__ import annotations

import collections
import re
import shutil
import statistics
import subprocess
from collections.abc import Sequence

from processor.localkafka.broker import LocalBroker
from processor.localkafka.tools import tools_libs

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
    batches: Sequence[tuple[int, float]], window: Sequence[float], writers: int | None
) -> float | None:
    """Markers inside ``window`` (start, end) per minute and writer, on one partition: the
    median over the producer ids that wrote there if ``writers`` is None, else all of them
    divided by ``writers``."""
    start, end = window
    if end <= start or (writers is not None and writers < 1):
        return None
    inside = collections.Counter(pid for pid, at in batches if start <= at <= end)
    if not inside:
        return None
    per_writer = [inside.total() / writers] if writers else list(inside.values())
    return round(statistics.median(per_writer) * 60 / (end - start), 1)


def commit_markers(
    broker: LocalBroker,
    topic: str,
    partitions: int,
    writers: int | None,
    window: Sequence[float] | None,
) -> float | None:
    """Commits per minute and writer over ``window``: the median over the topic's partitions
    (`per_minute`)."""
    if window is None:
        return None
    rates = [
        r
        for p in range(partitions)
        if (r := per_minute(control_batches(broker, topic, p), window, writers)) is not None
    ]
    return sorted(rates)[len(rates) // 2] if rates else None
