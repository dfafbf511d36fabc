"""Record metadata against the real broker, with a worker SIGKILLed mid-stream: keyed
records with headers through a source with ``key="text"``, ``key_by(meta=True)``, ``process``
reading ``state.headers``, ``map(meta=True)`` at the source stage and after a shuffle; an
undecodable key in the DLQ as it came. Every output checked exactly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.integration.pipeline_run import PipelineRun, read_committed

MODULE = Path(__file__).with_name("meta_pipeline.py")
USERS = 17
RECORDS = 900
BAD_KEY = 451  # the record whose key is not UTF-8
# Recent: the broker deletes records with timestamps older than its retention at any time.
START_MS = int(time.time() * 1000) // 1000 * 1000


def _record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes | None]], int]:
    """Record ``i``: key, value, headers, timestamp."""
    key = f"u{i % USERS}".encode() if i != BAD_KEY else b"\xffu"
    headers: list[tuple[str, bytes | None]] = []
    if i % 3:
        headers.append(("source", b"web" if i % 3 == 1 else b"app"))
    if i % 5 == 0:
        headers += [("bin", bytes([i % 256, 0, 255])), ("nothing", None)]
    return key, json.dumps({"i": i}).encode(), headers, START_MS + i


def test_metadata_reaches_user_code_exactly_once_through_a_kill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = {"events": "events", "outcomes": "outcomes", "tagged": "tagged", "shuffled": "sh"}
    run = PipelineRun(
        kafka_bootstrap, tmp_path, MODULE, topics, shuffle_partitions="2", expected_workers="2"
    )
    events = run.topics["events"]

    def send(chunk: list[int]) -> None:
        for i in chunk:
            key, value, headers, ts = _record(i)
            run._produce(events, value, key=key, headers=headers, timestamp=ts)
        run._flush()

    try:
        run.start(workers=2)
        run.feed_values(list(range(RECORDS)), 4, send, hold_halfway=True)
        run.kill_mid_stream(1)
        run.drain(timeout=120)
        # Where each record landed in the source topic: the positions meta must give.
        where: dict[int, tuple[int, int]] = {}
        for p, records in read_committed(kafka_bootstrap, events).items():
            for offset, (_, value, _) in enumerate(records):
                where[json.loads(value or b"")["i"]] = (p, offset)
        assert len(where) == RECORDS
        good = [i for i in range(RECORDS) if i != BAD_KEY]

        def hexed(i: int) -> list[list[Any]]:
            return [[n, None if v is None else v.hex()] for n, v in _record(i)[2]]

        tagged = [
            json.loads(v or b"")
            for part in read_committed(kafka_bootstrap, run.topics["tagged"]).values()
            for _, v, _ in part
        ]
        assert sorted(tagged) == [
            [i, f"u{i % USERS}", _record(i)[3], events, *where[i], hexed(i)] for i in good
        ]

        shuffled = [
            json.loads(v or b"")
            for part in read_committed(kafka_bootstrap, run.topics["shuffled"]).values()
            for _, v, _ in part
        ]
        assert sorted(shuffled) == [
            [i, i % 3, _record(i)[3], hexed(i), [None, None, None]] for i in good
        ]

        # Per user, a running count in input order, each with its record's source header.
        got: dict[bytes | None, list[Any]] = {}
        for part in read_committed(kafka_bootstrap, run.topics["outcomes"]).values():
            for key, value, _ in part:
                got.setdefault(key, []).append(json.loads(value or b""))
        want: dict[bytes | None, list[Any]] = {}
        for i in good:
            out = want.setdefault(f"u{i % USERS}".encode(), [])
            source = dict(_record(i)[2]).get("source")
            out.append({"i": i, "n": len(out) + 1, "source": source and source.decode()})
        assert got == want

        dead = [
            (k, v, h)
            for part in read_committed(kafka_bootstrap, run.settings.dlq_topic).values()
            for k, v, h in part
        ]
        assert len(dead) == 1, dead
        key, value, headers = dead[0]
        assert (key, value) == _record(BAD_KEY)[:2]
        assert headers["topic"] == events.encode()
        assert (int(headers["partition"]), int(headers["offset"])) == where[BAD_KEY]
        assert headers["error"].startswith(b"key not UTF-8")
    finally:
        run.stop()


def test_windows_over_keys_from_meta_close_by_event_time_through_a_kill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    module = tmp_path / "windowed.py"
    module.write_text(f"import runpy\nbuild = runpy.run_path({str(MODULE)!r})['build_windowed']\n")
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        module,
        {"events": "events", "windows": "windows"},
        shuffle_partitions="2",
        expected_workers="2",
    )
    events = run.topics["events"]
    start = START_MS // 1000 * 1000
    n = 700

    def send(chunk: list[int]) -> None:
        for i in chunk:
            ts = start + i * 10  # 100 records per second of event time
            value = json.dumps({"ts": ts}).encode()
            run._produce(events, value, key=f"u{i % 7}".encode())
        if chunk and chunk[-1] == n - 1:  # past every window in both partitions: they close
            for p in range(2):
                late = json.dumps({"ts": start + 60_000}).encode()
                run._produce(events, late, key=b"end", partition=p)
        run._flush()

    try:
        run.start(workers=2)
        run.feed_values(list(range(n)), 4, send, hold_halfway=True)
        run.kill_mid_stream(1)
        run.drain(timeout=120)
        counts: dict[str, int] = {}
        for i in range(n):
            window = f"u{i % 7}@{start + i * 10 // 1000 * 1000}"
            counts[window] = counts.get(window, 0) + 1
        want = {k.encode(): b"%d" % c for k, c in counts.items()}
        got = [
            (k, v)
            for part in read_committed(kafka_bootstrap, run.topics["windows"]).values()
            for k, v, _ in part
        ]
        assert len(got) == len(want)  # each window once
        assert dict(got) == want
    finally:
        run.stop()
