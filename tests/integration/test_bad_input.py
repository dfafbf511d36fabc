"""Bad input, tried systematically: each kind has a defined outcome and the job carries on.

Outcomes: ``data`` (processed as text), ``dlq`` (skipped, counted and copied to <job>.dlq),
``skipped:<reason>`` (skipped and counted). Valid records around them are counted exactly.
"""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from processor.kafka import clients
from processor.models.records import (
    BARRIER_HEADER,
    Barrier,
    Headers,
    encode_barrier,
    encode_counts,
    encode_shuffle,
)
from processor.serde.codec import sink_value
from tests.integration.harness import JobRun, wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.integration.poison import poison, send

Dead = tuple[bytes, dict[str, bytes]]

_garbage = bytes(random.Random(3).randrange(256) for _ in range(4096)) + b"\xff"
LONG_WORD = "x" * 100_000
BARRIER_VALUE, BARRIER_HEADERS = encode_barrier(Barrier(999, 0))

# (case, value, headers, outcome)
CASES: list[tuple[str, bytes | None, bool, str]] = [
    ("null", None, False, "skipped:null"),
    ("empty", b"", False, "skipped:empty"),
    ("non-UTF-8", b"\xff\xfe not utf8", False, "dlq"),
    ("1 MB line", ("lorem ipsum dolor " * 55_000).encode()[:1_000_000], False, "data"),
    ("100k words", " ".join(f"w{i % 997}" for i in range(100_000)).encode(), False, "data"),
    ("binary garbage", _garbage, False, "dlq"),
    ("control characters", b"ctrl\x00chars\x01here\x1b[31m red\x7f", False, "data"),
    ("forged barrier header, text", b"forged barrier words", True, "data"),
    ("forged barrier header, barrier bytes", BARRIER_VALUE, True, "dlq"),
    ("oversized key", f"{LONG_WORD} tail".encode(), False, "skipped:oversized_key"),
    ("UTF-8 of a lone surrogate", b"\xed\xa0\x80 surrogate", False, "dlq"),
    ("200 KB of control characters", b"\x01" * 200_000 + b" controls", False, "data"),
]
# Not UTF-8, with its key just under the producer's limit: too large for the DLQ's headers,
# so the dead record keeps a prefix and says so.
HUGE, HUGE_KEY = b"\xff" + b"x" * 999_699, b"K" * 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_input_table(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = _free_port()
    run = JobRun(kafka_bootstrap, tmp_path, input_partitions=1)
    try:
        run.produce([b"good words before"])
        for _, value, forged, _ in CASES:
            run.produce([value], headers=BARRIER_HEADERS if forged else None)
        send(run._producer, [(run.settings.input_topic, HUGE, HUGE_KEY, 0)])
        run.produce([b"good words after"])
        del run.expected[LONG_WORD]  # the one word too long to be a key
        run.start_coordinator()
        run.start_worker(0, metrics_port=port)
        run.finish()

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            text = page.read().decode()
        skipped = {
            sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "processor_records_skipped_total"
            and sample.labels.get("task") == "split-0"
            and sample.labels.get("job_name") == run.job
            and sample.value
        }
        dlq_cases = [value for _, value, _, outcome in CASES if outcome == "dlq"]
        assert skipped == {
            "null": 1,
            "empty": 1,
            "non_utf8": len(dlq_cases) + 1,
            "oversized_key": 1,
        }
        dead = _read_all(run, run.settings.dlq_topic, expect=len(dlq_cases) + 1)
        assert [value for value, _ in dead[:-1]] == dlq_cases
        huge, headers = dead[-1]
        assert headers["truncated"] == b"%d" % len(HUGE) and HUGE.startswith(huge)
        assert len(huge) + len(HUGE_KEY) + sum(len(k) + len(v) for k, v in headers.items()) < 10**6
        first_offset = 1 + [c for c, *_ in CASES].index("non-UTF-8")
        assert dead[0][1]["topic"] == run.settings.input_topic.encode()
        assert dead[0][1]["offset"] == str(first_offset).encode()
        assert dead[0][1]["error"].startswith(b"not UTF-8")
        assert run.expected["tail"] == 1 and run.expected["forged"] == 1
        assert run.expected["controls"] == 1
    finally:
        run.stop()


def test_bad_json_input_table(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A JSON pipeline (timestamp function, pass-through sink, windows): each poison record
    dead once, counted by its reason, logged once per reason and kind of error (a user
    function's error with its traceback), and the good records' output exact."""
    port = _free_port()
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        Path(__file__).resolve().parent / "poison.py",
        {"events": "events", "passthrough": "passthrough", "windows": "windows"},
        source_partitions=1,
    )
    events = run.topics["events"]
    t0 = int(time.time() * 1000)
    good = [json.dumps({"k": "a", "ts": t0 + i}).encode() for i in range(4)]
    no_time = [b'{"k": "a"}'] * 3  # KeyError in the timestamp function
    cases = poison(t0 + 1)
    records = good[:2] + no_time + [c.value for c in cases] + good[2:]
    keys = [None] * (2 + len(no_time)) + [c.key for c in cases] + [None] * 2
    try:
        send(run._producer, [(events, v, k, 0) for v, k in zip(records, keys, strict=True)])
        run.start_coordinator()
        run.start_worker(0, metrics_port=port)
        run.wait_idle(120)

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            text = page.read().decode()
        skipped = Counter[str]()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == "processor_records_skipped_total"
                    and sample.labels.get("job_name") == run.job
                ):
                    skipped[sample.labels["reason"]] += int(sample.value)
        want = Counter(c.reason for c in cases) + Counter(function_error=len(no_time))
        assert +skipped == want
        dead = read_committed(kafka_bootstrap, run.settings.dlq_topic)
        assert sum(map(len, dead.values())) == len(cases) + len(no_time)
        # Keyless records: the sink's partitioner may spread them over partitions, so the
        # order holds within a partition only.
        expected = [sink_value(json.loads(raw)) for raw in good]
        parts = read_committed(kafka_bootstrap, run.topics["passthrough"]).values()
        through = [v or b"" for part in parts for _, v, _ in part]
        assert sorted(through) == sorted(expected)
        for part in parts:
            values = [v for _, v, _ in part]
            assert values == [v for v in expected if v in values]

        log = run.log("worker-0")
        # The first 10 dead records of an operator are logged in full (then a line a
        # minute): the 3 KeyErrors, each with the traceback, and 7 poison records at the
        # source; the one too large for the pass-through sink at that operator.
        assert log.count("Traceback") == len(no_time) and "KeyError: 'ts'" in log
        assert log.count(f"at {events}) from {events}[0]@") == 10
        assert log.count("(the first 10 of an operator are logged, then a line a minute)") == 1
        assert f"(oversized_record at passthrough) from {events}[0]@" in log
        for case in cases[:7]:
            assert f"({case.reason} at {events}) from {events}[0]@" in log, case
        assert " failed: " not in log
    finally:
        run.stop()


def _read_all(run: JobRun, topic: str, expect: int) -> list[Dead]:
    consumer = clients.consumer(run.settings, **{"group.id": f"{run.job}.inspect"})
    out: list[Dead] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        wait_until(lambda: _drain(consumer, out) >= expect, 30, f"{expect} dead letters")
    finally:
        consumer.close()
    return out


def _drain(consumer: Consumer, out: list[Dead]) -> int:
    for m in consumer.consume(100, 0.2):
        value = m.value()
        if m.error() is None and value is not None:
            raw = m.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = {k: v for k, v in pairs if isinstance(v, bytes)}
            out.append((value, headers))
    return len(out)


def test_malformed_records_in_the_shuffle_topic_are_skipped_and_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Records nobody's source task wrote, on the internal topic: skipped, counted, no crash."""
    port = _free_port()
    run = JobRun(kafka_bootstrap, tmp_path, input_partitions=2, shuffle_partitions="2")
    unknown_channel_barrier, _ = encode_barrier(Barrier(7, channel=999))
    bad: list[tuple[bytes, Headers | None]] = [
        (encode_counts(999, {"ghost": 5}), None),  # data from a channel that does not exist
        (b"\x00\x00{not json", None),
        (encode_shuffle(0, [["ghost", 1, 5]]), None),  # timed pairs into an untimed stage
        (b"\x00", None),
        (b"\x01\x02\x03", [(BARRIER_HEADER, b"\x01\x02\x03")]),  # barrier body too short
        (unknown_channel_barrier, [(BARRIER_HEADER, unknown_channel_barrier)]),
    ]
    try:
        run.produce([b"good words before"] * 50)
        run.start_coordinator()
        run.start_worker(0, metrics_port=port)
        run.wait_for_checkpoints(2)
        for partition in range(2):
            for value, headers in bad:
                run._producer.produce(
                    run.settings.shuffle_topic, value, partition=partition, headers=headers
                )
        assert run._producer.flush(30) == 0
        run.produce([b"good words after"] * 50)
        run.finish()
        assert run.dead_workers() == []
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        skipped = sum(
            sample.value
            for family in text_string_to_metric_families(text.decode())
            for sample in family.samples
            if sample.name == "processor_records_skipped_total"
            and sample.labels.get("reason") == "malformed_shuffle"
            and sample.labels.get("job_name") == run.job
        )
        assert skipped == 2 * len(bad)
        assert "Traceback" not in run.log("worker-0")
    finally:
        run.stop()
