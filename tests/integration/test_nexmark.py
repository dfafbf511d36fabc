"""The quick Nexmark (issue #42): queries of examples/nexmark run by the engine on the
``nexmark`` crate's own events, a worker SIGKILLed mid-stream, each output equal to the
query's definition computed directly (tests/nexmark_data.py) over the same events; and
``processor nexmark generate``, which loads them.

The events are made by the crate's binary (0.2.0; deploy/test.sh installs it where cargo
is). The job starts with 2 workers; once it has completed a checkpoint, `processor nexmark
generate`'s load sends the events at the crate's own rate, 10,000 a second, then a closing
event per partition so that every window closes. Once a checkpoint has committed input of
every partition, and before all of it, worker 1 is SIGKILLed and replaced; a source must
resume from a checkpoint. When the job is idle (every event committed, then 3 checkpoints
more: the coordinator's own rule, which it cannot apply here, as it would find the job idle
before the first event), an independent read_committed reader reads back the input topic
(the events to compute the definition from) and the output. CI runs q1 (selection), q3 (the
buffered join), q4 (updating) and q5 (windows); PROCESSOR_TEST_NEXMARK_ALL=1 runs all nine.
Row queries compare as multisets, each row once; the updating q4 (average price per
category) and q6 (per seller) by their last value per key: their intermediate values depend
on where checkpoints fall. q4 and q6 lose a bid behind the watermark (tests/unit/test_nexmark.py,
xfail); here none is: each partition holds the crate's events in event-time order, blocks
of some 20 ms of event time round robin, well within the queries' out-of-orderness (1 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pydantic import SecretStr

from processor.commands import nexmark as generate
from processor.config import Settings
from processor.kafka import clients
from tests import nexmark_data as nexmark
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed

QUERIES = Path(__file__).resolve().parents[2] / "examples" / "nexmark"
EVENTS = 40_000  # 4 s of the crate's event time
RATE = 10_000  # events/s of the load: the crate's own rate (event time as fast as real time)
PARTITIONS = 2
# Row queries: each output row once. Updating queries: the last value per key.
QUICK = ("q1", "q3", "q4", "q5")  # what CI runs; all nine with PROCESSOR_TEST_NEXMARK_ALL=1
UPDATING = ("q4", "q6")  # the others: each row once
ALL = bool(os.environ.get("PROCESSOR_TEST_NEXMARK_ALL"))


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return generate.find_binary()
    except generate.NexmarkError as exc:
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.mark.parametrize(
    "query",
    [
        q if q in QUICK else pytest.param(q, marks=pytest.mark.skipif(not ALL, reason="not quick"))
        for q in (f"q{n}" for n in range(9))
    ],
)
def test_query_on_the_crates_events_with_a_worker_killed(
    query: str, binary: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        QUERIES / f"{query}.py",
        {"events": "nexmark", "output": f"nexmark-{query}"},
        source_partitions=PARTITIONS,
        interval_ms=300,
        shuffle_partitions="2",
        expected_workers="2",
    )
    events, output = run.topics["events"], run.topics["output"]
    loaded: list[generate.Rate | BaseException] = []
    try:
        # Not leaving when idle: it would, before the first event comes.
        run.start_coordinator(exit_when_idle=False)
        run.start_worker(0)
        run.start_worker(1)
        wait_until(lambda: " complete in " in run.log("coordinator"), 90, "a first checkpoint")
        loader = threading.Thread(target=_load, args=(run, binary, events, loaded), daemon=True)
        loader.start()
        wait_until(run._sources_committed, 90, "committed positions in every source partition")
        assert _committed(run, events) < EVENTS, "the job had all its input before the kill"
        assert " started on " in run.log("worker-1"), "worker-1 runs no task"
        run.kill_worker(1)
        run.start_worker(1)
        loader.join(120)
        assert [r.events for r in loaded if isinstance(r, generate.Rate)] == [EVENTS], loaded
        # Done as the coordinator's --exit-when-idle sees it: every input committed, then 3
        # checkpoints more (each barrier behind all of it, windows and timers closed too).
        ends = EVENTS + PARTITIONS
        wait_until(lambda: _committed(run, events) == ends, 150, "every event committed")
        run.wait_for_checkpoints(3)

        stream = [json.loads(v or b"") for _, v, _ in _records(kafka_bootstrap, events)]
        assert len(stream) == EVENTS + PARTITIONS  # the crate's, and the closing ones
        got = _records(kafka_bootstrap, output)
        want: Any = getattr(nexmark, query)(stream)
        if query not in UPDATING:
            assert len(want) >= (1 if query == "q7" else 5)  # q7: a row or more a 10 s window
            rows = nexmark.canonical([json.loads(v or b"") for _, v, _ in got])
            missing, extra = nexmark.canonical(want) - rows, rows - nexmark.canonical(want)
            assert not missing and not extra, (
                f"{sum(missing.values())} missing, e.g. {list(missing)[:2]}; "
                f"{sum(extra.values())} extra, e.g. {list(extra)[:2]}"
            )
        else:
            last = {(k or b"").decode(): json.loads(v or b"") for k, v, _ in got}
            assert len(want) >= 5 and last == want
        logs = run.log("worker-0") + run.log("worker-1")
        resumed = re.search(rf"resuming {re.escape(events)} at {{.+}} \(checkpoint [1-9]", logs)
        assert resumed, "no source resumed from a checkpoint after the kill"
        for topic in (f"{run.job}.late", run.settings.dlq_topic):
            assert not any(read_committed(kafka_bootstrap, topic).values()), topic
    finally:
        run.stop()


def _load(run: PipelineRun, binary: Path, topic: str, loaded: list[Any]) -> None:
    """The crate's events into ``topic`` at its own rate, then closed (`processor nexmark
    generate`'s load, in this process: it starts at once, while the job runs)."""
    try:
        loaded.append(generate.load(run.settings, binary, EVENTS, topic, PARTITIONS, True, RATE))
    except BaseException as exc:  # noqa: BLE001 - the test fails on it
        loaded.append(exc)


def _committed(run: PipelineRun, topic: str) -> int:
    """Input records the job committed so far (its group's offsets), the closing ones too."""
    wanted = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    config = {"bootstrap.servers": run.bootstrap}
    return sum(tp.offset for tp in clients.committed_offsets(config, run.settings.group_id, wanted))


Record = tuple[bytes | None, bytes | None, dict[str, bytes]]


def _records(bootstrap: str, topic: str) -> list[Record]:
    return [r for part in read_committed(bootstrap, topic).values() for r in part]


def test_generate_loads_every_line_of_the_crate_once(
    binary: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`processor nexmark generate`: the topic holds the crate's own lines (the same as the
    binary prints, but for the time it started at), each once, each partition in the crate's
    order, then the closing event; a second load into the topic is refused."""
    topic, events = f"nexmark-{uuid.uuid4().hex[:8]}", 3000
    args = ["--events", str(events), "--topic", topic, "--partitions", "3", "--closing"]
    first, again = (_cli(kafka_bootstrap, ["nexmark", "generate", *args]) for _ in range(2))
    assert first.returncode == 0, first.stderr
    assert re.search(
        r"^generator alone: 3,000 events in [\d.]+ s, [\d,]+ events/s", first.stdout, re.M
    )
    assert re.search(
        rf"^loader: 3,000 events into {topic} in [\d.]+ s, [\d,]+ events/s", first.stdout, re.M
    )
    assert again.returncode == 1 and "already holds records" in again.stderr

    crate = subprocess.run(
        [str(binary), "--no-wait", "--number", str(events)], capture_output=True, check=True
    ).stdout.splitlines()
    parts = [
        [v or b"" for _, v, _ in part] for part in read_committed(kafka_bootstrap, topic).values()
    ]
    assert len(parts) == 3 and all(len(part) > 1 for part in parts)
    closing = [json.loads(part[-1])["Person"] for part in parts]
    loaded = [line for part in parts for line in part[:-1]]
    assert Counter(_from_zero(loaded)) == Counter(_from_zero(crate))
    last = max(generate.event_time(line) for line in loaded)
    assert [(c["id"], c["date_time"]) for c in closing] == [(0, last + generate.CLOSING_MS)] * 3
    for part in parts:
        times = [generate.event_time(line) for line in part]
        assert times == sorted(times)


def test_load_waits_while_the_producers_queue_is_full(binary: Path, kafka_bootstrap: str) -> None:
    """A producer queue of one record: the load waits for room, the closing events too (they
    come right after the last event, which is still in the queue; they raised BufferError)."""
    topic = f"nexmark-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        job_name=f"nexmark-load-{uuid.uuid4().hex[:8]}",
        kafka_config={"queue.buffering.max.messages": SecretStr("1")},
    )
    loaded = generate.load(settings, binary, 60, topic, 2, closing=True)
    assert loaded.events == 60
    parts = read_committed(kafka_bootstrap, topic).values()
    assert sum(map(len, parts)) == 62
    assert [json.loads(part[-1][1] or b"")["Person"]["id"] for part in parts] == [0, 0]


def _from_zero(lines: list[bytes]) -> list[str]:
    """The events with their times from the first event's: runs of the crate differ only in
    the time they started at."""
    events = [json.loads(line) for line in lines]
    start = min(next(iter(e.values()))["date_time"] for e in events)
    out = []
    for event in events:
        fields = next(iter(event.values()))
        for name in ("date_time", "expires"):
            if name in fields:
                fields[name] -= start
        out.append(json.dumps(event, sort_keys=True))
    return out


def _cli(bootstrap: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", *args],
        env={**os.environ, "PROCESSOR_BOOTSTRAP_SERVERS": bootstrap},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
