"""Latency of a Nexmark query's output, measured the same way for both engines (the live
phase, bench/nexmark_live.py).

**Definition.** For each output row: the wall time at which it became visible to a
read_committed reader of the output topic (`OutputTimes`: a consumer that reads the topic
while the job runs and stamps each record with the time its fetch returned) minus the wall
time at which the broker acknowledged the last input event the row depends on (the
replayer's acknowledgements, bench/nexmark_replay.py `AckLog`):

- q0, q1, q2 (one row per bid): the bid it came from. The row is found among the events sent
  by its canonical form (bench/nexmark_output.py ``_row``, a 64-bit digest); identical rows
  are matched in the order sent. Sampled: q0 and q1 rows whose bid's ``date_time`` is a
  multiple of ``SAMPLE_MS`` ms (a cheap test on the record's bytes, so the reader costs the
  machine little), every q2 row.
- q5, q7, q8 (one row per window, the window's end in the row: q5 and q7 ``window_end``, q8
  ``window_start`` + 10 s): the event that closed the window. A window ending at ``e`` closes
  once the watermark passes it, and the watermark is the least over the partitions of the
  highest event time less the out-of-orderness (1 s, both engines): the dependency is, per
  partition, the first event with ``date_time >= e + 1 s``, and the latest acknowledged of
  those. Rows closed only by the closing events (no such event in some partition) are left
  out.
- q3 (a join: the later of the person and the auction), q4 and q6 (updating, each key's value
  changes with every bid) are not measured.

Only rows whose dependency was acknowledged inside the measured window (after the warm-up,
before the rate stopped) count; their p50 and p99 (nearest rank).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.harness.measure import percentile
from bench.nexmark_output import _row
from bench.nexmark_replay import BLOCK, AckLog, placement

DEFINITION = __doc__  # what the results file says latency is
PER_RECORD = ("q0", "q1", "q2")
WINDOWED = ("q5", "q7", "q8")
MEASURED = PER_RECORD + WINDOWED
NOT_MEASURED = {
    "q3": "a join: not measured (its rows depend on two events)",
    "q4": "updating: not measured",
    "q6": "updating: not measured",
}
OUT_OF_ORDERNESS_MS = 1000  # both engines' (examples/nexmark/*.py, bench/flink/nexmark)
SAMPLE_MS = 16  # q0, q1: rows of bids whose date_time is a multiple of this
_DATE_TIME = re.compile(rb'"date_time"\s*:\s*(-?\d+)')


def digest(row: str) -> int:
    return int.from_bytes(hashlib.blake2b(row.encode(), digest_size=8).digest(), "little")


def sampled(query: str, value: bytes) -> bool:
    """Whether the reader keeps this output record for the latency (cheap: no JSON parse)."""
    if query not in ("q0", "q1"):
        return query in MEASURED
    found = _DATE_TIME.search(value)
    return found is not None and int(found[1]) % SAMPLE_MS == 0


def window_end(query: str, row: dict[str, Any]) -> int:
    if query == "q8":
        return int(row["window_start"]) + 10_000
    return int(row["window_end"])


class Dependencies:
    """What the events sent give the latency, gathered while the prefix is fed to
    bench/nexmark_expect.py's `Expected` (`event` before each ``add``, `row` its ``on_row``):
    per sampled q0-q2 row, where its bid went (partition, offset); per partition, the first
    offset whose event time reaches each whole second; the last event time."""

    def __init__(self, query: str, partitions: int, block: int = BLOCK) -> None:
        self.query = query
        self.partitions = partitions
        self.block = block
        self.places: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.firsts: dict[int, dict[int, int]] = defaultdict(dict)
        self._next_second: dict[int, int] = {}
        self.current = (0, 0)
        self.last_ms = 0

    def event(self, index: int, event: dict[str, dict[str, Any]]) -> None:
        self.current = placement(index, self.partitions, self.block)
        at = int(next(iter(event.values()))["date_time"])
        self.last_ms = max(self.last_ms, at)
        if self.query not in WINDOWED:
            return
        partition, offset = self.current
        second = self._next_second.get(partition, -(-at // 1000))
        while second * 1000 <= at:
            self.firsts[partition][second] = offset
            second += 1
        self._next_second[partition] = second

    def row(self, query: str, row: str, bid: dict[str, Any]) -> None:
        if query != self.query:
            return
        if query in ("q0", "q1") and int(bid["date_time"]) % SAMPLE_MS:
            return
        self.places[digest(row)].append(self.current)

    def depends_on(self, value: bytes, acks: AckLog) -> float | None:
        """The wall time (s) at which the input the output record ``value`` depends on was
        acknowledged; None if unknown (not sampled, or closed by the closing events)."""
        row = json.loads(value)
        if self.query in PER_RECORD:
            places = self.places.get(digest(_row(row)))
            if not places:
                return None
            return acks.at(*places.pop(0))
        if self.query not in WINDOWED:
            return None
        second = -(-(window_end(self.query, row) + OUT_OF_ORDERNESS_MS) // 1000)
        times = []
        for partition in range(self.partitions):
            offset = self.firsts.get(partition, {}).get(second)
            if offset is None:
                return None
            at = acks.at(partition, offset)
            if at is None:
                return None
            times.append(at)
        return max(times)


def latencies(
    kept: Sequence[tuple[float, bytes]],
    deps: Dependencies,
    acks: AckLog,
    start: float,
    end: float,
) -> dict[str, Any]:
    """p50/p99 (ms) of the kept rows whose dependency was acknowledged in [start, end]."""
    values = []
    unmatched = 0
    for seen, value in kept:
        at = deps.depends_on(value, acks)
        if at is None:
            unmatched += 1
        elif start <= at <= end:
            values.append(seen - at)
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return {
        "rows_measured": len(values),
        "rows_kept": len(kept),
        "rows_without_dependency": unmatched,
        "p50_ms": None if p50 is None else round(1000 * p50, 1),
        "p99_ms": None if p99 is None else round(1000 * p99, 1),
        "max_ms": round(1000 * max(values), 1) if values else None,
        "min_ms": round(1000 * min(values), 1) if values else None,
    }


class OutputTimes(threading.Thread):
    """A read_committed reader of the output while the job runs: every record counted, the
    sampled ones (`sampled`) kept with the wall time their fetch returned."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, query: str) -> None:
        super().__init__(daemon=True, name=f"nexmark-output-{topic}")
        self.query = query
        self.kept: list[tuple[float, bytes]] = []
        self.records = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"nexmark-latency-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                batch = self._consumer.consume(1000, 0.1)
                now = time.time()
                for msg in batch:
                    value = msg.value()
                    if msg.error() is not None or value is None:
                        continue
                    self.records += 1
                    if sampled(self.query, value):
                        self.kept.append((now, value))
        except Exception as exc:  # noqa: BLE001 - reported with the run
            self.error = exc
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
