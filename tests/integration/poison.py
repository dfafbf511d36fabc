"""The poison record tests' pipeline and records (issue #22, hole 1).

The pipeline: a JSON source with a timestamp function, every record passed through to a sink
as it is (values and sizes matter), and counts per key in one-second windows (keys and event
times matter). The records: what a user can send that once crash-looped a source task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from processor import Pipeline

WINDOW_MS = 1000


def _ts(record: Any) -> Any:
    return record["ts"]


def build(
    events: str = "events", passthrough: str = "passthrough", windows: str = "windows"
) -> Pipeline:
    p = Pipeline()
    source = p.source(events, value="json", timestamp=_ts, idle_ms=60_000)
    source.sink(passthrough, name="passthrough")
    (
        source.map(lambda r: r["k"], name="keys")
        .key_by(str, name="by-key")
        .window(size_ms=WINDOW_MS, name="second")
        .count(name="per-second")
        .sink(windows, name="windows")
    )
    return p


@dataclass(frozen=True)
class Poison:
    case: str
    value: bytes
    key: bytes | None
    reason: str  # its processor_records_skipped_total label
    windowed: bool = False  # counted in the windows all the same (dead at the pass-through)


def poison(ts: int, key: str = "k") -> list[Poison]:
    """Each poison record; ``ts``: the event time of the ones that have a valid one; ``key``:
    the field the pipeline keys by (``"k"`` here)."""
    k = key.encode()
    deep = b'{"%s": "a", "ts": %d, "d": %s}' % (k, ts, b"[" * 300 + b"]" * 300)
    # 1e5 is 100000.0 written again: 4 bytes grow to 9, 700 KB to 1.6 MB.
    grows = b'{"%s": "big", "ts": %d, "v": [%s]}' % (k, ts, b",".join([b"1e5"] * 175_000))
    return [
        Poison("surrogate key", b'{"%s": "\\ud800", "ts": %d}' % (k, ts), None, "invalid_unicode"),
        Poison(
            "surrogate value",
            b'{"%s": "a", "ts": %d, "v": "x\\udfff"}' % (k, ts),
            None,
            "invalid_unicode",
        ),
        Poison("5000 unclosed brackets", b"[" * 5000, None, "too_deep"),
        Poison("a document nested 300 deep", deep, None, "too_deep"),
        Poison("event time 1e19", b'{"%s": "a", "ts": 1e19}' % k, None, "bad_event_time"),
        Poison("event time -1e19", b'{"%s": "a", "ts": -1e19}' % k, None, "bad_event_time"),
        Poison("event time inf", b'{"%s": "a", "ts": 1e400}' % k, None, "bad_event_time"),
        Poison("event time NaN", b'{"%s": "a", "ts": NaN}' % k, None, "bad_event_time"),
        Poison("event time true", b'{"%s": "a", "ts": true}' % k, None, "function_error"),
        Poison("grows past the limit", grows, None, "oversized_record", windowed=True),
        # With its key just under the producer's limit: too large for the DLQ's headers.
        Poison("999,900 bytes, not JSON", b"{" + b"x" * 999_699, b"K" * 200, "not_json"),
    ]


def send(producer: Producer, records: list[tuple[str, bytes, bytes | None, int]]) -> None:
    """(topic, value, key, partition) records, in order, flushed on return."""
    for topic, value, key, partition in records:
        while True:
            try:
                producer.produce(topic, value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
