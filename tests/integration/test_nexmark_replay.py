"""The Nexmark live phase's replayer (bench/loadgen/.../NexmarkReplay.java, driven by
bench/nexmark_replay.py) on the session's broker: the lines of a file, in order, blocks round
robin over the partitions as `placement` says, at a rate, then the closing event to every
partition; each record's acknowledgement time handed over. A few seconds; skipped when the
load generator's jar cannot be built."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.nexmark_replay import Replayer, check_placement, placement
from bench.nexmark_replay import prepare as prepare_replayer
from processor.commands.nexmark import closing_event
from tests import nexmark_data as nexmark
from tests.integration.pipeline_run import read_committed

PARTITIONS, BLOCK = 3, 16


@pytest.fixture(scope="module")
def replayer_jar() -> None:
    try:
        prepare_replayer()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"the load generator's jar cannot be built: {exc}")


def _events_file(path: Path, count: int) -> list[bytes]:
    lines = [json.dumps(e, separators=(",", ":")).encode() for e in nexmark.events(count, 11)]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return lines


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_prefix_of_the_file_in_place_then_the_closing_events(
    replayer_jar: None, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    lines = _events_file(tmp_path / "events.jsonl", 20_000)
    topic = new_topic(partitions=PARTITIONS)
    replay = Replayer(
        kafka_bootstrap, topic, PARTITIONS, tmp_path / "events.jsonl", tmp_path / "r", BLOCK
    )
    replay.start()
    try:
        replay.set_rate(3000)
        deadline = time.monotonic() + 30
        while not any(s.acked >= 1000 for s in replay.status) and time.monotonic() < deadline:
            time.sleep(0.1)
        sent = replay.stop()
        assert 1000 <= sent < len(lines) and replay.exhausted_at is None
        closing = closing_event(1_000_000)
        acks = replay.close(closing)
    finally:
        replay.kill()
    want: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    tails = {}
    for index, line in enumerate(lines[:sent]):
        partition, offset = placement(index, PARTITIONS, BLOCK)
        assert offset == len(want[partition])
        want[partition].append(line)
        tails[partition] = (offset, line)
    got = read_committed(kafka_bootstrap, topic)
    for partition in range(PARTITIONS):
        values = [value for _, value, _ in got[partition]]
        assert values == [*want[partition], closing]
        times = [t for o in range(len(values)) if (t := acks.at(partition, o)) is not None]
        assert len(times) == len(values) and times == sorted(times)
    check_placement(kafka_bootstrap, topic, tails)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_replay_ends_at_the_files_end(
    replayer_jar: None, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    lines = _events_file(tmp_path / "events.jsonl", 500)
    topic = new_topic(partitions=PARTITIONS)
    replay = Replayer(
        kafka_bootstrap, topic, PARTITIONS, tmp_path / "events.jsonl", tmp_path / "r", BLOCK
    )
    replay.start()
    try:
        replay.set_rate(50_000)
        deadline = time.monotonic() + 30
        while replay.exhausted_at is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert replay.exhausted_at == len(lines)
        assert replay.stop() == len(lines)
        replay.close(closing_event(1_000_000))
    finally:
        replay.kill()
    got = read_committed(kafka_bootstrap, topic)
    assert sum(len(records) for records in got.values()) == len(lines) + PARTITIONS
