"""A keyed source (`Pipeline.keyed_source`) run by the engine: the carts of test_carts.py
with their ``process`` in the source tasks (no shuffle), a worker SIGKILLed mid-stream and
replaced; every outcome once, as computed from the input, and the per-record count after a
shuffle out of those tasks 1, 2, 3... with no gap and no repeat. And a record written into
another partition than its key's is dead (``misplaced_key``), the others counted."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

from processor.commands.state import get, request
from processor.models.murmur2 import partition_of
from tests.carts_data import canonical, carts
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed

Fed = tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]

MODULE = Path(__file__).with_name("keyed_carts_pipeline.py")
TOPICS = {
    "cart_events": "cart-events",
    "cart_outcomes": "cart-outcomes",
    "events_per_type": "events-per-type",
}


def _placed(key: bytes, partition: int, partitions: int) -> bytes:
    """``key`` with a suffix that librdkafka's default partitioner (CRC-32) puts in
    ``partition``."""
    n = 0
    while zlib.crc32(key + b"-%d" % n) % partitions != partition:
        n += 1
    return key + b"-%d" % n


def test_a_keyed_source_with_a_worker_killed_mid_stream_is_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    data = carts(sessions=3000, partitions=2, seed=5)
    # Each partition's closing tick (past every timer) must be in that partition: a key
    # that hashes there, as every record of a keyed source must have.
    records: list[Fed] = [
        (k, v, h, None) if p is None else (_placed(k or b"", p, 2), v, h, None)
        for k, v, h, p in data.records
    ]
    run = PipelineRun(
        kafka_bootstrap, tmp_path, MODULE, TOPICS, shuffle_partitions="2", expected_workers="2"
    )
    try:
        run.start(workers=2)
        run.feed_records("cart_events", records, seconds=4)
        run.kill_mid_stream(1)
        run.drain(timeout=180)
        got: Counter[tuple[str, str]] = Counter()
        for part in read_committed(kafka_bootstrap, run.topics["cart_outcomes"]).values():
            for key, value, _ in part:
                result = json.loads(value or b"")
                assert key == result["user"].encode()
                got[result["user"], canonical(result)] += 1
        missing, extra = data.outcomes - got, got - data.outcomes
        assert not missing and not extra, (list(missing)[:3], list(extra)[:3])
        counts: dict[str, list[int]] = {}
        for part in read_committed(kafka_bootstrap, run.topics["events_per_type"]).values():
            for raw_key, value, _ in part:
                counts.setdefault((raw_key or b"").decode(), []).append(int(value or b"0"))
        assert {t: len(c) for t, c in counts.items()} == dict(data.per_type)
        for event_type, updates in counts.items():
            assert updates == list(range(1, data.per_type[event_type] + 1)), event_type
        dead = read_committed(kafka_bootstrap, run.settings.dlq_topic)
        assert not any(dead.values()), "every record is in its key's partition"
    finally:
        run.stop()


def test_a_record_outside_its_keys_partition_is_dead(kafka_bootstrap: str, tmp_path: Path) -> None:
    module = Path(__file__).with_name("keyed_count_pipeline.py")
    topics = {"words": "words", "counts": "counts"}
    run = PipelineRun(kafka_bootstrap, tmp_path, module, topics, expected_workers="1")
    keys = [b"k%d" % i for i in range(20)]
    records: list[Fed] = [(k, b"x", [], partition_of(k, 2)) for k in keys * 10]
    wrong = 1 - partition_of(b"k1", 2)
    records[50:50] = [(b"k1", b"elsewhere", [], wrong), (None, b"no key", [], 0)]
    try:
        run.start(workers=1)
        run.feed_records("words", records, seconds=1)
        run.resume_feed()
        run.drain(timeout=120)
        last: dict[bytes, int] = {}
        for part in read_committed(kafka_bootstrap, run.topics["counts"]).values():
            for key, value, _ in part:
                last[key or b""] = int(value or b"0")
        assert last == dict.fromkeys(keys, 10)
        dead = [
            r for p in read_committed(kafka_bootstrap, run.settings.dlq_topic).values() for r in p
        ]
        assert sorted(value or b"" for _, value, _ in dead) == [b"elsewhere", b"no key"]
        assert {value: key for key, value, _ in dead} == {b"elsewhere": b"k1", b"no key": None}
        errors = {value: headers["error"].decode() for _, value, headers in dead}
        assert f"but its key's is {1 - wrong} (the murmur2 partitioner" in errors[b"elsewhere"]
        assert "but it has no key" in errors[b"no key"], errors
    finally:
        run.stop()


def test_a_job_from_a_savepoint_of_a_keyed_source_counts_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The second job reads the same topic from the savepoint's positions, each task's
    counts from its saved snapshot: every key's count goes on from the first job's."""
    module = Path(__file__).with_name("keyed_count_pipeline.py")
    topics = {"words": "words", "counts": "counts"}
    keys = [b"k%d" % i for i in range(20)]
    first = PipelineRun(kafka_bootstrap, tmp_path / "first", module, topics)
    second: PipelineRun | None = None
    try:
        first.start(workers=1)
        first.feed_records("words", [(k, b"x", [], partition_of(k, 2)) for k in keys * 3], 1)
        first.resume_feed()
        first.drain(timeout=120)
        first.stop()
        name = f"sp-{first.job}"
        taken = subprocess.run(
            [sys.executable, "-m", "processor", "savepoint", "--last-completed", "--name", name],
            env=first.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert taken.returncode == 0, taken.stderr
        second = PipelineRun(
            kafka_bootstrap,
            tmp_path / "second",
            module,
            topics,
            topic_prefix=first.job,
            checkpoint_dir=str(tmp_path / "first" / "checkpoints"),
            from_savepoint=name,
        )
        second.start(workers=1)
        second.feed_records("words", [(k, b"y", [], partition_of(k, 2)) for k in keys * 2], 1)
        second.resume_feed()
        second.drain(timeout=120)
        updates: dict[bytes, list[int]] = {}
        for part in read_committed(kafka_bootstrap, first.topics["counts"]).values():
            for key, value, _ in part:
                updates.setdefault(key or b"", []).append(int(value or b"0"))
        assert {k: u[-1] for k, u in updates.items()} == dict.fromkeys(keys, 5)
        assert all(u == sorted(set(u)) for u in updates.values()), "counts only rise"
        assert "loaded savepoint" in second.log("worker-0")
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_keyed_sources_state_is_read_from_the_task_its_partitioner_names(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """With the state API on: each key's committed count from the workers directly (the one
    whose task holds it answers, the other says 421) and through the coordinator, which
    routes by the partitioner over the topic's partitions, not by the shuffle's."""
    module = Path(__file__).with_name("keyed_count_pipeline.py")
    topics = {"words": "words", "counts": "counts"}
    run = PipelineRun(
        kafka_bootstrap, tmp_path, module, topics, shuffle_partitions="5", state_api="on"
    )
    ports = [_free_port(), _free_port(), _free_port()]
    workers, coordinator = [f"http://127.0.0.1:{p}" for p in ports[:2]], ports[2]
    keys = [b"k%d" % i for i in range(20)]
    try:
        run.start_coordinator()
        for i in (0, 1):
            run.start_worker(i, metrics_port=ports[i])
        run.feed_records("words", [(k, b"x", [], partition_of(k, 2)) for k in keys * 3], 1)
        run.resume_feed()
        run.drain(timeout=120)
        # The coordinator left with the job idle: again, to forward the reads (it learns the
        # placement from the heartbeats, the workers' URLs from their endpoint messages).
        run.start_coordinator(exit_when_idle=False, metrics_port=coordinator)
        up = f"http://127.0.0.1:{coordinator}/api/status"
        wait_until(lambda: request(up).status != 0, 60, "the coordinator's port")
        for key in keys:
            for urls in (workers, [f"http://127.0.0.1:{coordinator}"]):
                answer = get(urls, "per_key", key.decode(), retry_s=30)
                assert answer.status == 200, (key, answer)
                assert answer.doc["value"] == 3, answer.doc
                task = answer.doc["task"]
                assert task.endswith(f"-{partition_of(key, 2)}"), (key, task)
    finally:
        run.stop()
