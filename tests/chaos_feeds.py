"""The inputs of the chaos run's variants (tests/chaos.py ``--clicks`` and ``--chained``, in
event time; ``--loops``) and their verification against a direct computation."""

from __future__ import annotations

import collections
import itertools
import json
import random
import time
from typing import Any

from processor.commands.counts import read_records
from processor.config import Settings
from processor.kafka import clients
from processor.kafka.replication import topic_replication
from tests import chaincheck, loopcheck
from tests.chaos_summary import Summary
from tests.integration.harness import JobRun
from tests.integration.pipeline_run import read_committed
from tests.integration.poison import poison
from tests.reference import SinkOutput
from tests.sinkcheck import check_sink
from tests.timecheck import (
    MINUTE,
    OUT_OF_ORDER,
    SINKS,
    Click,
    View,
    closing,
    pairs,
    stream,
    windows,
)

SOURCE_PARTITIONS = 3  # of each of the clicks run's two source topics (the chained run's clicks)
PROMOTION_PARTITIONS = 2  # of the chained run's promotions
POISON_EVERY = 20_000  # the chained run mixes a set of poison records into each so many clicks


class ClicksFeed:
    """The clicks run's input (tests/timecheck.py): clicks and views round-robin over the
    partitions of their topics, the views' event time as the Kafka timestamp, then a closing
    click and view in every partition."""

    def __init__(self, run: JobRun, clicks: int, seed: int) -> None:
        self.run = run
        span = clicks * 60  # at most: 50 ms a click, 10 s more per 1000
        # In the recent past: the broker refuses timestamps more than an hour ahead.
        now = int(time.time() * 1000)
        t0 = (now - span - 15 * MINUTE) // MINUTE * MINUTE
        self.views, self.clicks, self._order = stream(t0, clicks, seed)
        last = max([c["ts"] for c in self.clicks] + [v["at"] for v in self.views])
        self.end = last + 3 * MINUTE  # past every window of the data and the join's bound
        admin = clients.admin(run.settings)
        copies = topic_replication(run.settings, admin)
        for topic in ("clicks", "views"):
            clients.ensure_topic(admin, topic, SOURCE_PARTITIONS, replication=copies)
        self._sent = {"clicks": 0, "views": 0}

    def start(self, seconds: float) -> None:
        click, view = closing(self.end)
        values = [json.dumps(e).encode() for e in self._order]
        values += [click] * SOURCE_PARTITIONS + [view] * SOURCE_PARTITIONS
        self.run.feed_values(values, seconds, self._send)

    def _send(self, chunk: list[bytes]) -> None:
        placed: list[tuple[str, bytes, int, int | None]] = []
        for raw in chunk:
            event: View | Click = json.loads(raw)
            topic = "views" if "at" in event else "clicks"
            at = event.get("at")
            n = self._sent[topic]
            self._sent[topic] = n + 1
            placed.append((topic, raw, n % SOURCE_PARTITIONS, at if isinstance(at, int) else None))
        self.run.send_placed(placed)

    def verify(self, summary: Summary) -> None:
        """Every window and pair of the data exactly once, nothing else, nothing late."""
        settings = self.run.settings
        watermark = self.end - OUT_OF_ORDER  # the clicks' bound; the views' is 0
        expected = windows(self.clicks, watermark)
        if expected != windows(self.clicks, self.end + 100 * MINUTE):
            raise AssertionError("the closing records do not close every window of the data")
        expected["view_clicks"] = pairs(self.views, self.clicks)
        verify_sinks(settings, {SINKS[param]: want for param, want in expected.items()}, summary)
        summary.wrong += len(read_records(settings, settings.dlq_topic, timeout=120))


def verify_sinks(
    settings: Settings, wanted: dict[str, collections.Counter[Any]], summary: Summary
) -> None:
    """Each sink topic holds exactly the records wanted of it (a multiset of (key, value)),
    and the job's late topic what it holds, into ``summary``."""
    for topic, want in wanted.items():
        got = read_records(settings, topic, timeout=120)
        check = check_sink(SinkOutput(False, list(want.elements())), got)
        summary.sinks[topic] = check
        summary.records_verified += check.records
        summary.lost += check.lost
        summary.duplicated += check.duplicated
        summary.unknown += check.unknown
    summary.late = len(read_records(settings, f"{settings.job_name}.late", timeout=120))


# A record of the chained run's feed: (topic, value, key, partition).
_Placed = tuple[str, bytes, bytes | None, int]


class ChainedFeed:
    """The chained run's input (tests/chaincheck.py): clicks and promotions round-robin over
    the partitions of their topics, in the order of their places in event time, with a set
    of poison records (tests/integration/poison.py) mixed into each `POISON_EVERY` clicks at
    random places, then a closing click and promotion in every partition."""

    def __init__(self, run: JobRun, clicks: int, seed: int) -> None:
        self.run = run
        now = int(time.time() * 1000)
        t0 = (now - clicks * 50 - 15 * MINUTE) // MINUTE * MINUTE  # recent, as the clicks run's
        self.clicks, self.promotions, order = chaincheck.stream(t0, clicks, seed)
        last = max(e["ts"] for e in order)
        self.end = last + 3 * MINUTE
        assert chaincheck.closes_everything(last, self.end)
        admin = clients.admin(run.settings)
        copies = topic_replication(run.settings, admin)
        clients.ensure_topic(admin, "clicks", SOURCE_PARTITIONS, replication=copies)
        clients.ensure_topic(admin, "promotions", PROMOTION_PARTITIONS, replication=copies)
        rng = random.Random(seed + 1)
        sets = max(1, clicks // POISON_EVERY)
        # Click number -> the poison cases to send after it (each case once per set).
        after: dict[int, list[int]] = collections.defaultdict(list)
        for _ in range(sets):
            for case in range(len(poison(0))):
                after[rng.randrange(clicks)].append(case)
        parts = {"clicks": SOURCE_PARTITIONS, "promotions": PROMOTION_PARTITIONS}
        sent = {"clicks": 0, "promotions": 0}
        offsets = {(topic, p): 0 for topic, n in parts.items() for p in range(n)}
        last_ts = dict.fromkeys(range(SOURCE_PARTITIONS), t0)
        self.placed: list[_Placed] = []
        # (partition, offset) in clicks -> the poison record's value and key.
        self.poison: dict[tuple[int, int], tuple[bytes, bytes | None]] = {}
        # Poison records dead at the shuffle (too large once encoded, at flush time, when
        # their batch is gone): a short repr in the DLQ, without the source's headers.
        self.too_big = 0

        def place(topic: str, value: bytes, key: bytes | None, partition: int) -> None:
            self.placed.append((topic, value, key, partition))
            offsets[topic, partition] += 1

        clicked = 0
        for event in order:
            topic = "promotions" if event["id"].startswith("p") else "clicks"
            partition = sent[topic] % parts[topic]
            sent[topic] += 1
            place(topic, json.dumps(event).encode(), None, partition)
            if topic == "clicks":
                last_ts[partition] = event["ts"]
                for case in after.get(clicked, []):
                    p = rng.randrange(SOURCE_PARTITIONS)
                    record = poison(last_ts[p], key="page")[case]
                    if record.reason == "oversized_record":
                        self.too_big += 1
                    else:
                        self.poison[p, offsets["clicks", p]] = (record.value, record.key)
                    place("clicks", record.value, record.key, p)
                clicked += 1
        for topic, n in parts.items():
            closing = {"id": "close", "page": "closing", "ts": self.end}
            for p in range(n):
                place(topic, json.dumps(closing).encode(), None, p)

    def start(self, seconds: float) -> None:
        self.run.feed_values(self.placed, seconds, self._send)

    def _send(self, chunk: list[_Placed]) -> None:
        for topic, value, key, partition in chunk:
            self.run._produce(topic, value, key=key, partition=partition)
        self.run._flush()

    def verify(self, summary: Summary) -> None:
        """Every window of both stages and every pair exactly once, nothing else, nothing
        late, and the DLQ holding each poison record once, as it came."""
        settings = self.run.settings
        expected = chaincheck.expected(self.clicks, self.promotions)
        verify_sinks(
            settings, {chaincheck.SINKS[param]: want for param, want in expected.items()}, summary
        )
        letters = read_committed(settings.bootstrap_servers, settings.dlq_topic, timeout=120)
        found: collections.Counter[tuple[int, int]] = collections.Counter()
        too_big = 0
        for key, value, headers in itertools.chain.from_iterable(letters.values()):
            summary.dead += 1
            if "offset" not in headers:  # not an input record as it came
                json_ok = value is not None and value.startswith(b'{"page":"big","ts":')
                if headers.get("operator") == b"by-page" and json_ok:
                    too_big += 1
                else:
                    summary.unknown += 1
                continue
            at = (int(headers.get("partition", b"-1")), int(headers.get("offset", b"-1")))
            sent = self.poison.get(at)
            if sent is None or headers.get("topic") != b"clicks" or key != sent[1]:
                summary.unknown += 1
                continue
            truncated = headers.get("truncated")
            if value is None or not (
                value == sent[0]
                if truncated is None
                else int(truncated) == len(sent[0]) and sent[0].startswith(value)
            ):
                summary.wrong += 1
            found[at] += 1
        summary.duplicated += sum(n - 1 for n in found.values()) + max(0, too_big - self.too_big)
        summary.lost += len(self.poison.keys() - found.keys()) + max(0, self.too_big - too_big)


class LoopsFeed:
    """The loop run's input (tests/loopcheck.py): random edges over a quarter as many
    vertices and a fifth as many retry jobs, side by side, for the job that runs both loops
    (`loopcheck.build`)."""

    def __init__(self, run: JobRun, edges: int, seed: int) -> None:
        self.run = run
        self.edges = loopcheck.random_edges(max(10, edges // 4), edges, seed)
        self.jobs = loopcheck.retry_jobs(max(1, edges // 5), seed)
        admin = clients.admin(run.settings)
        copies = topic_replication(run.settings, admin)
        for topic in ("edges", "jobs"):
            clients.ensure_topic(admin, topic, SOURCE_PARTITIONS, replication=copies)

    def start(self, seconds: float) -> None:
        items = [("edges", json.dumps(e).encode()) for e in self.edges]
        items += [("jobs", json.dumps(j).encode()) for j in self.jobs]
        random.Random(len(items)).shuffle(items)

        def send(chunk: list[tuple[str, bytes]]) -> None:
            for topic in ("edges", "jobs"):
                self.run.send(topic, [v for t, v in chunk if t == topic])

        self.run.feed_values(items, seconds, send)

    def verify(self, summary: Summary) -> None:
        """Per vertex, components strictly decreasing from itself to the smallest id of its
        component (union-find); each job done once, after as many tries as it had."""
        settings = self.run.settings
        per_vertex: dict[int, list[int]] = collections.defaultdict(list)
        for _, value in read_records(settings, "components", timeout=120):
            record = json.loads(value or b"")
            per_vertex[record["vertex"]].append(record["component"])
        want = loopcheck.smallest_in_component(self.edges)
        for vertex, seen in per_vertex.items():
            summary.records_verified += len(seen)
            summary.duplicated += sum(a <= b for a, b in itertools.pairwise(seen))
            summary.wrong += seen[0] != vertex
            summary.unknown += vertex not in want
        summary.lost += sum(
            v not in per_vertex or per_vertex[v][-1] != smallest for v, smallest in want.items()
        )
        done = collections.Counter[tuple[str, int]]()
        for _, value in read_records(settings, "done", timeout=120):
            record = json.loads(value or b"")
            done[record["id"], record["tries"]] += 1
        jobs = collections.Counter((j["id"], j["left"]) for j in self.jobs)
        summary.records_verified += sum(done.values())
        summary.lost += sum((jobs - done).values())
        summary.duplicated += sum((done - jobs).values())
        summary.wrong += len(read_records(settings, settings.dlq_topic, timeout=120))
