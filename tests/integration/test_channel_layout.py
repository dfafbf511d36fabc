"""A join's left input topic gains partitions: its right side's channel numbers would shift.

The coordinator refuses the job with one line before any task runs; the job's last completed
checkpoint, copied as a savepoint, starts a new job that reads the new partitions from their
start, and every pair comes out once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

from processor.kafka import clients
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed

JOIN = """from processor import Pipeline


def build(views, clicks, pairs):
    p = Pipeline()
    view = p.source(views, value="json", timestamp=lambda v: v["ts"])
    click = p.source(clicks, value="json", timestamp=lambda c: c["ts"])
    (
        view.key_by(lambda v: v["id"], name="views-by-id")
        .join(click.key_by(lambda c: c["view"], name="clicks-by-view"), 60_000, name="joined")
        .map(lambda pair: pair[0]["id"] + ">" + pair[1]["id"])
        .sink(pairs)
    )
    return p
"""


def test_a_joins_left_topic_gaining_partitions_is_refused_then_moved_by_a_savepoint(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    module = tmp_path / "join.py"
    module.write_text(JOIN)
    topics = {"views": "views", "clicks": "clicks", "pairs": "pairs"}
    first = PipelineRun(kafka_bootstrap, tmp_path / "first", module, topics, shuffle_partitions="2")
    views, clicks = first.topics["views"], first.topics["clicks"]
    t = int(time.time() * 1000) - 600_000

    def send(topic: str, records: list[tuple[str, str, int, int]]) -> None:
        """(id, view id, event time, partition)"""
        first.send_placed(
            (topic, json.dumps({"id": i, "view": v, "ts": ts}).encode(), part, None)
            for i, v, ts, part in records
        )

    def pairs() -> Counter[str]:
        got = read_committed(kafka_bootstrap, first.topics["pairs"])
        return Counter(json.loads(v) for part in got.values() for _, v, _ in part if v)

    second: PipelineRun | None = None
    try:
        send(views, [(f"v{i}", f"v{i}", t + i * 100, i % 2) for i in range(10)])
        send(clicks, [(f"c{i}", f"v{i % 10}", t + 50 + i * 50, i % 2) for i in range(20)])
        first.start_coordinator()
        first.start_worker(0)
        first.wait_idle(120)
        before = Counter(f"v{i % 10}>c{i}" for i in range(20))
        assert pairs() == before

        # The left topic gains two partitions, which get views; their clicks come on the
        # right topic's old partitions.
        admin = clients.admin(first.settings)  # referenced until the result is in
        admin.create_partitions([NewPartitions(views, 4)])[views].result(30)
        producer = first._producer  # its metadata must know them before it can send there
        wait_until(
            lambda: len(producer.list_topics(views, 10).topics[views].partitions) == 4,
            30,
            "the new partitions",
        )
        send(views, [(f"v{i}", f"v{i}", t + 20_000 + i, 2 + i % 2) for i in range(10, 14)])
        send(clicks, [(f"c{i}", f"v{i - 10}", t + 20_100 + i, i % 2) for i in range(20, 24)])
        first.start_coordinator()
        assert first.coordinator is not None
        assert first.coordinator.wait(60) == 2
        last = first.log("coordinator").strip().splitlines()[-1]
        assert last.startswith(
            f"processor: source topic '{views}' has 4 partitions, 2 when checkpoint "
        ), last
        assert "the input channels of 'joined' would change" in last
        assert "processor savepoint --last-completed" in last
        first.stop()
        assert pairs() == before  # no task ran with the shifted channels

        taken = subprocess.run(
            [sys.executable, "-m", "processor", "savepoint", "--last-completed"],
            env={**first.env, "PROCESSOR_PIPELINE": first.env["PROCESSOR_PIPELINE"]},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert taken.returncode == 0, taken.stderr
        name = taken.stdout.split()[1].rstrip(":")
        second = PipelineRun(
            kafka_bootstrap,
            tmp_path / "second",
            module,
            topics,
            topic_prefix=first.job,
            shuffle_partitions="3",
            checkpoint_dir=str(tmp_path / "first" / "checkpoints"),
            from_savepoint=name,
        )
        second.start_coordinator()
        second.start_worker(0)
        second.wait_idle(120)
        # The new views met their clicks, and the first ten views' state went on.
        after = Counter(f"v{i - 10}>c{i}" for i in range(20, 24))
        assert pairs() == before + after
    finally:
        first.stop()
        if second is not None:
            second.stop()
