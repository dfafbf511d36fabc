"""Event time on the engine: tumbling, hopping and session windows and a two-topic join
(examples/clicks.py), one worker SIGKILLed mid-stream and replaced. Every window is emitted
exactly once with the exact count and every pair exactly once, as computed directly from the
input; one partition of the clicks gets no records (its idleness must not hold the watermark
back); records sent after the watermark passed them are counted in ``<job>.late``."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration import chained_windows, idle_window
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed
from tests.reference import SinkRecord
from tests.timecheck import MINUTE, OUT_OF_ORDER, PAGES, Click, View, pairs, records, windows

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clicks.py"
# Of the clicks topic's 3 partitions the third gets only the first few clicks: it goes idle,
# and must not hold the watermark back.
CLICK_PARTITIONS = 2
IDLE_AFTER = 10


def _events(t0: int) -> tuple[list[View], list[Click]]:
    """Views and clicks over ten minutes of event time, clicks at most 1.5 s out of order
    (under the source's 2 s bound), with a 10 s pause every 400 clicks (sessions end)."""
    rng = random.Random(5)
    views = [View(id=f"v{i}", at=t0 + i * 1000) for i in range(600)]
    clicks = []
    shift = 0
    for i in range(3000):
        if i and i % 400 == 0:
            shift += 10_000
        ts = t0 + i * 200 + shift - rng.randrange(1500)
        view = rng.randrange(600)
        clicks.append(Click(id=f"c{i}", page=rng.choice(PAGES), view_id=f"v{view}", ts=ts))
    return views, clicks


def test_windows_and_join_exact_under_a_kill(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        EXAMPLE,
        {
            "clicks": "clicks",
            "views": "views",
            "per_minute": "per-minute",
            "hopping": "hopping",
            "sessions": "sessions",
            "view_clicks": "view-clicks",
        },
        source_partitions=3,
        interval_ms=400,
    )
    clicks_topic, views_topic = run.topics["clicks"], run.topics["views"]
    t0 = (int(time.time() * 1000) // MINUTE) * MINUTE - 20 * MINUTE  # recent: the broker
    views, clicks = _events(t0)  # refuses timestamps far from now
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sequence = [0]

    def send(chunk: list[bytes]) -> None:
        for raw in chunk:
            record = json.loads(raw)
            if "at" in record:  # a view: its event time is the Kafka timestamp
                producer.produce(views_topic, raw, timestamp=int(record["at"]))
            else:
                sequence[0] += 1
                n = sequence[0]
                partition = 2 if n <= IDLE_AFTER else n % CLICK_PARTITIONS
                producer.produce(clicks_topic, raw, partition=partition)
        assert producer.flush(60) == 0

    # Views and clicks interleaved by event time, as they would happen.
    merged = sorted(
        [(v["at"], json.dumps(v).encode()) for v in views]
        + [(c["ts"], json.dumps(c).encode()) for c in clicks],
    )
    # No pause in the feed: partitions idle mid-stream would make the records after the
    # pause late (as in any engine with idleness), and the test compares exactly.
    run.start_coordinator(exit_when_idle=False)
    run.start_worker(0)
    run.start_worker(1)
    try:
        run.feed_values([raw for _, raw in merged], 20, send)
        wait_until(run._sources_committed, 60, "committed positions in every source partition")
        run.kill_worker(1)
        run.start_worker(1)
        assert run._feeder is not None
        run._feeder.join(120)
        # Records far ahead in event time on every partition that has any: the watermark
        # passes every window of the data (the windows these open never close).
        end = t0 + 15 * MINUTE
        closing = {"id": "close", "page": "closing", "view_id": "none", "ts": end}
        for p in range(CLICK_PARTITIONS):
            producer.produce(clicks_topic, json.dumps(closing).encode(), partition=p)
        for p in range(3):
            producer.produce(
                views_topic, json.dumps({"id": "close"}).encode(), partition=p, timestamp=end
            )
        assert producer.flush(60) == 0
        watermark = end - OUT_OF_ORDER  # the clicks' bound; views have none
        expected = windows(clicks, watermark)
        sinks = {name: run.topics[name] for name in expected}

        def all_windows() -> bool:
            return all(
                sum(records(read_committed(kafka_bootstrap, sinks[n])).values())
                >= sum(expected[n].values())
                for n in expected
            )

        wait_until(all_windows, 120, "every window closed by the watermark")
        for name, want in expected.items():
            got = records(read_committed(kafka_bootstrap, sinks[name]))
            assert got == want, f"{name}: {sorted((got - want).items())[:5]} extra, " + str(
                sorted((want - got).items())[:5]
            )
        assert sum(expected["sessions"].values()) > len(PAGES) * 3, "too few sessions"
        got_pairs = records(read_committed(kafka_bootstrap, run.topics["view_clicks"]))
        want_pairs = pairs(views, clicks)
        assert got_pairs == want_pairs, f"pairs: {len(got_pairs)} got, {len(want_pairs)} expected"

        # Now late: a click and a view from the first minute, long closed.
        early = {"id": "late", "page": PAGES[0], "view_id": "v1", "ts": t0 + 5}
        producer.produce(clicks_topic, json.dumps(early).encode(), partition=0)
        producer.produce(views_topic, json.dumps({"id": "v1"}).encode(), partition=0, timestamp=t0)
        assert producer.flush(60) == 0
        late_topic = f"{run.job}.late"
        # The click is late at the three windows and at the join, the view at the join.
        wait_until(
            lambda: sum(len(p) for p in read_committed(kafka_bootstrap, late_topic).values()) >= 5,
            60,
            "the late records in <job>.late",
        )
        late = read_committed(kafka_bootstrap, late_topic)
        assert sum(len(p) for p in late.values()) == 5
        for name, want in expected.items():  # nothing else happened to them
            assert records(read_committed(kafka_bootstrap, sinks[name])) == want
    finally:
        run.stop()


CHAINED = Path(__file__).resolve().parent / "chained_windows.py"


def test_a_window_with_lateness_feeds_a_window_downstream(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``window(1000, lateness_ms=500).count()``, key_by, ``window(1000).sum()``, one worker
    SIGKILLed mid-stream: the second window's results are exactly the events per window, and
    nothing is late. Event time moves about 300 ms per chunk fed, so checkpoints forward the
    first stage's watermark while its windows wait out their lateness, and some events come
    up to 400 ms behind that watermark (within the lateness) and still count."""
    run = PipelineRun(
        kafka_bootstrap,
        tmp_path,
        CHAINED,
        {"events": "events", "windows": "windows"},
        source_partitions=2,
        interval_ms=300,
    )
    rng = random.Random(7)
    t0 = 1_700_000_000_000
    # Each event less than bound + 400 ms behind its place: behind its partition's watermark
    # (newest - bound) by less than the lateness, so no event is late at the first window.
    behind = chained_windows.OUT_OF_ORDER_MS + chained_windows.LATENESS_MS - 100
    stamps = [t0 + 3 * i - rng.randrange(behind) for i in range(4000)]
    events = [json.dumps({"k": rng.choice("abcd"), "ts": ts}).encode() for ts in stamps]
    topic = run.topics["events"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent = [0]

    def send(chunk: list[bytes]) -> None:
        for raw in chunk:
            producer.produce(topic, raw, partition=sent[0] % 2)
            sent[0] += 1
        assert producer.flush(60) == 0

    per_window = Counter(ts - ts % 1000 for ts in stamps)
    expected: Counter[SinkRecord] = Counter(
        (f"all@{s}".encode(), str(n).encode()) for s, n in per_window.items()
    )
    late_topic = f"{run.job}.late"
    run.start_coordinator(exit_when_idle=False)
    run.start_worker(0)
    run.start_worker(1)
    try:
        run.feed_values(events, 20, send)
        wait_until(run._sources_committed, 60, "committed positions in every source partition")
        run.kill_worker(1)
        run.start_worker(1)
        assert run._feeder is not None
        run._feeder.join(120)
        # Far ahead on both partitions: every window of the data closes, in both stages.
        closing = json.dumps({"k": "closing", "ts": t0 + 10 * 60_000}).encode()
        send([closing, closing])

        def done() -> bool:
            late = read_committed(kafka_bootstrap, late_topic)
            got = records(read_committed(kafka_bootstrap, run.topics["windows"]))
            return any(late.values()) or sum(got.values()) >= len(expected)

        wait_until(done, 120, "every window of the second stage, or a late record")
        late = read_committed(kafka_bootstrap, late_topic)
        assert not any(late.values()), f"{sum(map(len, late.values()))} records late"
        got = records(read_committed(kafka_bootstrap, run.topics["windows"]))
        assert got == expected, (sorted((got - expected).items())[:3], len(expected - got))
    finally:
        run.stop()


IDLE_WINDOW = Path(__file__).resolve().parent / "idle_window.py"


def _idle_window_run(kafka_bootstrap: str, tmp_path: Path) -> PipelineRun:
    """idle_window.py on one input partition, a checkpoint every 300 ms."""
    return PipelineRun(
        kafka_bootstrap,
        tmp_path,
        IDLE_WINDOW,
        {"events": "events", "windows": "windows"},
        source_partitions=1,
        interval_ms=300,
    )


def test_a_source_idle_at_its_next_checkpoint_forwards_what_it_read_first(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The last records of a stream read, then no checkpoint for longer than ``idle_ms``
    (the coordinator stopped): the source's next mark is an idle one, whose time readers ignore.
    It must send the watermark of what it read first, or the windows of those records never
    close (before: the idle mark carried the last time sent, and the last window stayed
    open)."""
    run = _idle_window_run(kafka_bootstrap, tmp_path)
    t0 = 1_700_000_000_000
    topic = run.topics["events"]

    def send(stamps: list[int]) -> None:
        run.send(topic, [json.dumps({"k": "a", "ts": ts}).encode() for ts in stamps])

    def windows() -> Counter[SinkRecord]:
        return records(read_committed(kafka_bootstrap, run.topics["windows"]))

    run.start_coordinator(exit_when_idle=False)
    run.start_worker(0)
    try:
        send([t0 + 10 * i for i in range(200)])  # windows t0 and t0 + 1000; t0 + 1999 seen
        first = Counter({(f"a@{t0}".encode(), b"100"): 1})
        wait_until(lambda: windows() == first, 60, "the first window")
        # No checkpoint while the source reads on and goes idle (a killed coordinator would
        # make its successor restart the tasks, which read the record again).
        assert run.coordinator is not None
        run.coordinator.send_signal(signal.SIGSTOP)
        time.sleep(1)  # the triggers it sent are taken
        send([t0 + 5000])  # closes the window at t0 + 1000
        time.sleep(3 * idle_window.IDLE_MS / 1000)
        run.coordinator.send_signal(signal.SIGCONT)
        second = first + Counter({(f"a@{t0 + 1000}".encode(), b"100"): 1})
        wait_until(lambda: windows() == second, 60, "the window the last record closes")
    finally:
        run.stop()


@pytest.mark.parametrize("drain", [True, False], ids=["drained", "not-drained"])
def test_a_drained_job_closes_every_window_before_it_exits(
    kafka_bootstrap: str, tmp_path: Path, drain: bool
) -> None:
    """``processor local --until-idle --drain`` (the coordinator's ``--exit-when-idle
    --drain``): once the input is done, event time ends and the last window fires before the
    job exits, as a bounded source ends in Flink. Without ``--drain`` that window stays open:
    nothing after it closes it."""
    run = _idle_window_run(kafka_bootstrap, tmp_path)
    t0 = 1_700_000_000_000
    run.send(
        run.topics["events"],
        [json.dumps({"k": "a", "ts": t0 + 10 * i}).encode() for i in range(250)],
    )
    run.start_coordinator(exit_when_idle=True, drain=drain)
    run.start_worker(0)
    try:
        assert run.coordinator is not None
        assert run.coordinator.wait(timeout=240) == 0, run.log("coordinator")[-2000:]
    finally:
        run.stop()
    got = records(read_committed(kafka_bootstrap, run.topics["windows"]))
    want = Counter({(f"a@{t0}".encode(), b"100"): 1, (f"a@{t0 + 1000}".encode(), b"100"): 1})
    if drain:
        want[(f"a@{t0 + 2000}".encode(), b"50")] = 1
    assert got == want
