"""One keyed task in-process, fed a shuffle partition written record by record.

Writing the shuffle log by hand puts barriers exactly where a scenario needs them (an upstream
that skipped ids, a late channel), which a whole job only produces by chance.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from processor.commands.counts import read_updates
from processor.config import load_settings
from processor.jobs import load_graph
from processor.kafka import clients
from processor.models.records import Barrier, encode_barrier, encode_counts
from processor.worker.layout import ChannelsChanged
from processor.worker.task import commit_metadata, committed_after_fencing
from tests.integration.harness import wait_until
from tests.integration.keyed_thread import KeyedTaskThread


class KeyedTaskRun(KeyedTaskThread):
    """Shuffle partition 0 of a fresh word-count job, and its keyed task in a thread."""

    def __init__(self, bootstrap: str, workdir: Path, channels: int) -> None:
        job = f"kt-{uuid.uuid4().hex[:8]}"
        settings = load_settings(
            bootstrap_servers=bootstrap,
            job_name=job,
            output_topic=f"{job}.counts",
            shuffle_partitions=1,
            state_dir=workdir / "state",
            checkpoint_dir=workdir / "checkpoints",
        )
        admin = clients.admin(settings)
        clients.ensure_topic(admin, settings.shuffle_topic, 1)
        clients.ensure_topic(admin, settings.output_topic, 1)
        super().__init__(
            settings, load_graph(settings), "count-0", settings.shuffle_topic, channels
        )
        self.expected: dict[str, int] = {}

    def data(self, channel: int, counts: dict[str, int]) -> None:
        for key, n in counts.items():
            self.expected[key] = self.expected.get(key, 0) + n
        self._send(encode_counts(channel, counts), None)

    def barrier(self, channel: int, checkpoint_id: int) -> None:
        value, headers = encode_barrier(Barrier(checkpoint_id, channel))
        self._send(value, headers)

    def committed(self) -> dict[str, object]:
        tp = TopicPartition(self.settings.shuffle_topic, 0)
        (committed,) = committed_after_fencing(self.settings, [tp])
        meta = commit_metadata(committed)
        return {"offset": committed.offset, "metadata": committed.metadata or "", **meta}

    def snapshots_dir(self) -> Path:
        root = self.settings.checkpoint_dir
        assert isinstance(root, Path)
        return root / self.settings.job_name / "count-0"

    def verify(self) -> None:
        """Per key strictly increasing values, the last one exact."""
        final, updates = read_updates(self.settings, self.settings.output_topic, timeout=60)
        assert final == self.expected
        for key, values in updates.items():
            assert all(a < b for a, b in itertools.pairwise(values)), f"{key}: {values}"


@pytest.fixture
def keyed_run(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[[int], KeyedTaskRun]]:
    runs: list[KeyedTaskRun] = []

    def make(channels: int) -> KeyedTaskRun:
        run = KeyedTaskRun(kafka_bootstrap, tmp_path, channels)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop()


def test_commit_metadata_stays_small_with_512_upstream_channels(
    keyed_run: Callable[[int], KeyedTaskRun],
) -> None:
    """The positions of 512 channels live in the snapshot, not in the offset's metadata,
    which the broker caps at offset.metadata.max.bytes (4096 by default)."""
    run = keyed_run(512)
    for channel in range(512):
        run.data(channel, {f"w{channel % 7}": 1})
    for channel in range(512):
        run.barrier(channel, 1)
    run.start()
    run.wait_for_ack(1)
    committed = run.committed()
    assert committed["checkpoint"] == 1
    assert len(str(committed["metadata"])) < 200
    run.stop()

    # A new incarnation finds every channel's position in the snapshot and skips exactly
    # what it holds.
    for channel in range(512):
        run.data(channel, {f"w{channel % 5}": 2})
    for channel in range(512):
        run.barrier(channel, 2)
    run.start()
    run.wait_for_ack(2)
    run.stop()
    run.verify()


def test_fallback_replay_ends_at_each_channels_committed_barrier(
    keyed_run: Callable[[int], KeyedTaskRun],
) -> None:
    """After a fallback restore, an upstream's barrier-id jump in the replayed range seeks back
    mid-batch; the quiet replay must still cover every record up to the committed barrier of
    each channel, so no committed count is emitted again (or below its committed value)."""
    run = keyed_run(3)
    for channel in range(3):
        run.data(channel, {"x": 1})
    for channel in range(3):
        run.barrier(channel, 1)
    run.data(0, {"x": 1})
    run.barrier(0, 3)  # channels 0 and 2 skipped checkpoint 2 (their sources recovered)
    run.data(2, {"x": 1})
    run.barrier(2, 3)
    run.barrier(0, 4)
    run.data(0, {"y": 1})
    run.barrier(2, 5)  # overtakes 4: alignment 4 is given up, and the task seeks back
    run.data(1, {"x": 1})
    run.data(1, {"z": 1})
    run.barrier(1, 3)  # channel 1's barrier 3, last: checkpoint 3 completes here
    run.start()
    run.wait_for_ack(3)
    run.stop()
    committed = run.committed()
    assert committed["checkpoint"] == 3

    # Snapshot 3 is lost: the task falls back to snapshot 1 and replays up to barrier 3.
    (manifest,) = run.snapshots_dir().glob(f"**/chk-{3:012d}/_snapshot.json")
    manifest.unlink()
    run.start()
    run.barrier(0, 5)
    run.barrier(1, 5)
    run.wait_for_ack(5)
    run.stop()
    run.verify()


def test_corrupt_committed_snapshot_falls_back_to_an_intact_one(
    keyed_run: Callable[[int], KeyedTaskRun], caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte in the committed snapshot is caught by its checksum at restore (RocksDB
    would only notice at the first read, crash-looping the task), and an older intact
    snapshot stands in for it."""
    run = keyed_run(2)
    for checkpoint_id in (1, 2):
        for channel in range(2):
            run.data(channel, {f"k{checkpoint_id}-{channel}": checkpoint_id, "all": 1})
        for channel in range(2):
            run.barrier(channel, checkpoint_id)
    run.start()
    run.wait_for_ack(2)
    run.stop()
    assert run.committed()["checkpoint"] == 2

    # RocksDB's MANIFEST file is stored per checkpoint: corrupting snapshot 2's leaves 1 intact.
    (stored,) = run.snapshots_dir().glob(f"**/chk-{2:012d}/MANIFEST-*")
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0x01
    stored.write_bytes(bytes(data))
    run.data(0, {"after": 1})
    run.start()
    for channel in range(2):
        run.barrier(channel, 3)
    run.wait_for_ack(3)
    run.stop()
    run.verify()
    assert f"checkpoint 2 ({stored.parent.parent.name}) of " in caplog.text
    assert "is corrupt (CRC-32" in caplog.text
    assert "falling back to checkpoint 1 (" in caplog.text


def test_a_snapshot_of_other_channels_stops_the_task_for_good(
    keyed_run: Callable[[int], KeyedTaskRun],
) -> None:
    """The upstream source topic gained a partition while no completed checkpoint told the
    coordinator: the restored task finds its snapshot's channel layout changed and stops for
    good with the one line, before it reads (and emits) anything."""
    run = keyed_run(2)
    for channel in range(2):
        run.data(channel, {"a": 1})
    for channel in range(2):
        run.barrier(channel, 1)
    run.start()
    run.wait_for_ack(1)
    run.stop()

    run.channels = 3
    run._send(encode_counts(2, {"a": 5, "new": 1}), None)  # the new channel's records
    run.start()
    wait_until(lambda: run.error is not None, 60, "the task to stop")
    assert isinstance(run.error, ChannelsChanged), run.error
    assert str(run.error).startswith(
        "checkpoint 1 was taken with 2 tasks of 'split' (channels 0-1), now 3 tasks of "
        "'split' (channels 0-2): its positions and watermarks per channel would be misread; "
    )
    assert len(run.acks) == 1
    run.verify()  # the output of checkpoint 1 and nothing else
