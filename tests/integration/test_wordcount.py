"""Word count through real processes on the real broker: exact counts, barriers, snapshots."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition

from processor.commands import corpus
from processor.kafka import clients
from processor.models.records import decode_barrier, is_barrier
from tests.integration.harness import JobRun


def test_known_corpus_through_two_workers_gives_exact_counts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = JobRun(kafka_bootstrap, tmp_path)
    try:
        run.produce(line.encode() for line in corpus.lines(300_000, seed=7))
        run.start(workers=2)
        run.wait_idle()
        verified = run.verify_exactly_once()
        assert verified >= len(run.expected)

        # The shuffle carries barriers as control records, from every source task.
        barriers = _barriers(run)
        assert {b.channel for b in barriers} == {0, 1, 2, 3}
        # Later checkpoints reuse SST files that earlier ones stored (incremental snapshots).
        manifests = run.snapshot_manifests()
        assert manifests, "no snapshot was stored"
        uses: dict[str, int] = {}
        for manifest in manifests:
            for key in manifest["files"].values():  # type: ignore[attr-defined]
                if key.endswith(".sst"):
                    uses[key] = uses.get(key, 0) + 1
        assert any(n > 1 for n in uses.values()), "no SST file is shared by two checkpoints"
    finally:
        run.stop()


def _barriers(run: JobRun) -> list:  # type: ignore[type-arg]
    settings = run.settings
    consumer = clients.consumer(settings, **{"group.id": f"{run.job}.inspect"})
    found = []
    try:
        topic = settings.shuffle_topic
        ends = {}
        for p in range(settings.shuffle_partitions):
            ends[p] = clients.watermark_offsets(consumer, TopicPartition(topic, p))[1]
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        seen = 0
        while seen < 200_000:
            msgs = consumer.consume(10_000, 1.0)
            if not msgs:
                break
            seen += len(msgs)
            found += [decode_barrier(m.value() or b"") for m in msgs if is_barrier(m.headers())]
    finally:
        consumer.close()
    return found
