"""Poison records among good ones, through the real broker (issue #22, hole 1).

A JSON source with a timestamp function, every record passed through to a sink, and counts
per key in one-second windows: keys, values, event times and sizes all matter. Among 3,000
good events come records a user can send that once crash-looped a source task (a lone
surrogate in a key and in a value, nesting past the parser, absurd event times, a record that
grows past Kafka's limit once written again, a record of almost 1 MB with its key that is no
JSON). The job must reach idle with every input offset committed; the sinks hold exactly the
good records' results; the DLQ holds each poison record once, as its original bytes.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import TopicPartition

from processor.kafka import clients
from processor.serde.codec import sink_value
from tests.integration.pipeline_run import PipelineRun, Record, read_committed
from tests.integration.poison import WINDOW_MS, poison, send

PIPELINE = Path(__file__).resolve().parent / "poison.py"
PARTITIONS = 2
GOOD = 3000
CLOSE_AFTER_MS = 10_000_000  # the closing records' event time: past every window of the data


def _committed_everything(run: PipelineRun, topic: str) -> None:
    """Every input offset committed by the source tasks' group."""
    wanted = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    config = {"bootstrap.servers": run.bootstrap}
    offsets = clients.committed_offsets(config, run.settings.group_id, wanted)
    committed = {tp.partition: tp.offset for tp in offsets}
    # Written without transactions: offsets from 0 on, one per record.
    ends = {p: len(part) for p, part in read_committed(run.bootstrap, topic).items()}
    assert committed == ends, f"committed {committed}, log ends {ends}"


def test_poison_records_become_dead_records_and_the_job_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        PIPELINE,
        {"events": "events", "passthrough": "passthrough", "windows": "windows"},
        source_partitions=PARTITIONS,
        shuffle_partitions="2",
    )
    events = run.topics["events"]
    t0 = (int(time.time() * 1000) // WINDOW_MS) * WINDOW_MS
    rng = random.Random(22)
    # Good events in event-time order on each partition (no record is late); each poison
    # record at a random place, with the event time of the last event on its partition.
    good = [
        (json.dumps({"k": f"k{i % 7}", "ts": t0 + i * 10, "v": i}).encode(), i) for i in range(GOOD)
    ]
    places = {rng.randrange(GOOD): case for case in range(len(poison(0)))}
    sends: list[tuple[str, bytes, bytes | None, int]] = []
    last_ts = dict.fromkeys(range(PARTITIONS), t0)
    counted: list[bytes] = []  # every record the windows count
    passed: list[bytes] = []  # every record the pass-through sink writes
    dead: list[tuple[bytes, bytes | None]] = []
    for value, i in good:
        partition = i % PARTITIONS
        sends.append((events, value, None, partition))
        last_ts[partition] = t0 + i * 10
        counted.append(value)
        passed.append(value)
        if i in places:
            p = rng.randrange(PARTITIONS)
            record = poison(last_ts[p])[places[i]]
            sends.append((events, record.value, record.key, p))
            dead.append((record.value, record.key))
            if record.windowed:
                counted.append(record.value)
    assert len(dead) == len(poison(0))
    closing = json.dumps({"k": "close", "ts": t0 + CLOSE_AFTER_MS}).encode()
    sends += [(events, closing, None, p) for p in range(PARTITIONS)]
    passed += [closing] * PARTITIONS
    try:
        run.start(workers=1)
        send(run._producer, sends)
        run.wait_idle(180)  # the unfixed engine never gets here: its source tasks crash-loop
        _committed_everything(run, events)

        windows = Counter(
            (key, value)
            for part in read_committed(kafka_bootstrap, run.topics["windows"]).values()
            for key, value, _ in part
        )
        want: Counter[str] = Counter()
        for raw in counted:
            record = json.loads(raw)
            want[f"{record['k']}@{record['ts'] - record['ts'] % WINDOW_MS}"] += 1
        assert windows == Counter((k.encode(), b"%d" % n) for k, n in want.items())

        through = Counter(
            value
            for part in read_committed(kafka_bootstrap, run.topics["passthrough"]).values()
            for _, value, _ in part
        )
        assert through == Counter(sink_value(json.loads(raw)) for raw in passed)

        inputs = read_committed(kafka_bootstrap, events)
        letters: list[Record] = [
            r
            for part in read_committed(kafka_bootstrap, run.settings.dlq_topic).values()
            for r in part
        ]
        assert len(letters) == len(dead)
        got: list[tuple[bytes, bytes | None]] = []
        for key, written, headers in letters:
            assert headers["topic"] == events.encode()
            partition, offset = int(headers["partition"]), int(headers["offset"])
            source_key, source_value, _ = inputs[partition][offset]
            assert key == source_key and written is not None and source_value is not None
            value = written
            if "truncated" in headers:  # too large for the DLQ with its headers: a prefix
                assert int(headers["truncated"]) == len(source_value)
                assert source_value.startswith(value) and len(value) > 990_000
                value = source_value
            assert value == source_value
            got.append((value, key))
        assert Counter(got) == Counter(dead)  # each poison record once, as it came
        log = run.log("worker-0")
        for reason in {record.reason for record in poison(0)}:
            assert f"({reason} at " in log, reason
        assert " failed: " not in log  # no task failed
    finally:
        run.stop()
