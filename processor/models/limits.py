"""What a record may be: the bounds every record is held to, so that any record, of any
content and size, becomes output or a dead record, and never a task that fails on it.

- JSON input nested deeper than `MAX_JSON_DEPTH` levels is dead at the source: Python's
  parser and encoder recurse, so a deeper document would fail wherever the stack happens to
  be deeper (an encode, a copy, the next stage's decode). The bound leaves every later step
  hundreds of frames to spare.
- JSON input holding a lone surrogate (an escape like ``\\ud800`` naming half a character,
  which ``json.loads`` accepts) is dead at the source: no UTF-8 text, so no key, sink record
  or shuffle record, can carry it.
- Event times are integers of milliseconds strictly within ±`EVENT_TIME_LIMIT` (2^53, about
  285,000 years either side of 1970): floats hold them exactly, and every window end and
  watermark derived from them stays far inside the int64 they are packed in.
- A record the engine writes (sink, shuffle, ``<job>.late``, ``<job>.dlq``) is at most
  `record_limit` bytes, key and headers included: librdkafka refuses a larger one
  (MSG_SIZE_TOO_LARGE), so it is a dead record instead; a dead record too large for the DLQ
  keeps a prefix of its value.

Pure, standard library only.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from itertools import compress
from typing import Any

MAX_JSON_DEPTH = 200
EVENT_TIME_LIMIT = 1 << 53
# librdkafka counts a record as key + value + headers + 36 bytes (measured with 2.x); the
# rest is headroom for the batch framing, within the broker's default 1 MiB + 12 bytes.
RECORD_OVERHEAD = 512
HEADER_OVERHEAD = 16  # per header: its name's and value's lengths as varints

# The start of an escape of a UTF-16 surrogate (paired or not): \uD800 to \uDFFF.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A high surrogate escape not followed by a low one, or a low one not after a high one: in
# text where no backslash is escaped (so every backslash-u starts an escape), a lone one.
_LONE_SURROGATE = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD])[c-fC-F])"
)


def record_limit(message_max_bytes: int) -> int:
    """The largest record (key + value + headers) to send to a producer whose
    ``message.max.bytes`` is ``message_max_bytes``."""
    return message_max_bytes - RECORD_OVERHEAD


# The largest record for librdkafka's default message.max.bytes.
DEFAULT_RECORD_LIMIT = record_limit(1_000_000)


def headers_size(headers: Sequence[tuple[str, bytes]]) -> int:
    return sum(len(name) + len(value) + HEADER_OVERHEAD for name, value in headers)


def json_problem(raw: bytes, value: Any) -> tuple[str, str] | None:
    """Why ``value`` (``json.loads(raw)``) cannot enter a pipeline: (metric reason, error),
    or None. Cheap unless ``raw`` is large or holds a surrogate escape."""
    if _SURROGATE_ESCAPE.search(raw) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            return "invalid_unicode", f"not valid Unicode: a lone surrogate ({exc.reason})"
    if _too_deep(raw, value):
        return "too_deep", f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return None


def json_problems(raws: list[bytes], values: list[Any]) -> bool:
    """Whether any ``values[i]`` (decoded from ``raws[i]``) has a `json_problem`: C loops
    over the whole batch first, one record at a time only where one may have."""
    if not raws:
        return False
    joined = b"\n".join(raws)
    if b"\\" in joined and (
        # An escaped backslash may make text look like an escape: then record by record.
        _LONE_SURROGATE.search(joined) is not None
        if b"\\\\" not in joined
        else _SURROGATE_ESCAPE.search(joined) is not None
    ):
        return any(json_problem(r, v) is not None for r, v in zip(raws, values, strict=True))
    # Each level takes two bytes and a bracket: only a long record with many brackets may be
    # too deep. Counting the brackets of all long ones at once is a few C loops.
    lengths = list(map(len, raws))
    if max(lengths) <= 2 * MAX_JSON_DEPTH:
        return False
    long = b"".join(compress(raws, map((2 * MAX_JSON_DEPTH).__lt__, lengths)))
    if long.count(b"[") + long.count(b"{") <= MAX_JSON_DEPTH:
        return False
    return any(_too_deep(raw, value) for raw, value in zip(raws, values, strict=True))


def _too_deep(raw: bytes, value: Any) -> bool:
    # Each level takes two bytes and a bracket; counting the brackets is a C loop.
    return (
        len(raw) > 2 * MAX_JSON_DEPTH
        and raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
        and _deeper_than(value, MAX_JSON_DEPTH)
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has more than ``limit`` levels of lists and dicts (without
    recursion: it may be deep enough to exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is list:
            children: Any = item
        elif type(item) is dict:
            children = item.values()
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def loads_deep(raw: bytes | str) -> Any:
    """``json.loads`` on a thread of its own: a fresh stack. For a value that was encoded
    in a shallower stack than the caller's (the caller's ``json.loads`` raised
    RecursionError): decoding needs no more depth than encoding did."""
    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(json.loads(raw))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="json-deep", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def in_range(times: list[int]) -> bool:
    """Whether every time of ``times`` (Kafka timestamps: int64) is a valid event time."""
    return not times or (max(times) < EVENT_TIME_LIMIT and min(times) > -EVENT_TIME_LIMIT)


def event_time_error(ts: Any) -> str:
    return (
        f"event time {ts!r:.40} is not an integer of ms within ±2^53 (about 285,000 years "
        "around 1970)"
    )


# Internal records (``<job>.control``, ``<job>.checkpoints``) are range-checked where they
# are read (issue 41, item 3): a number out of these ranges is a forged or broken record,
# skipped and counted, never an OverflowError or an id that overflows its 64-bit field.
INT64_MAX = (1 << 63) - 1
# Checkpoint ids and assignment generations: far inside int64, so that the next one (a
# barrier id, id + 1) always fits; one a millisecond for 146 million years.
MAX_ID = 1 << 62
# How far above the coordinator's own history (its last completed checkpoint, plus the ones
# it triggered since) a checkpoint id a worker names may be: ids that tasks committed in
# checkpoints that failed. Above: not from this job, ignored and counted.
MAX_ID_JUMP = 1 << 32
# Durations and sizes in seconds that a checkpoint may report (about 31 years).
MAX_SECONDS = 1e9
# Wall-clock times (Unix seconds) of internal records: from 1970 to the year 36812.
MAX_WALL_TIME_S = float(1 << 40)
# How far ahead of a reader's clock another process of the job may be. A generation or a
# lease renewal further ahead than that is not from a live process of the job.
MAX_CLOCK_SKEW_S = 600.0
