"""Bad input gets a defined outcome: skipped and counted, dead-lettered, or processed as data."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from processor.kafka import clients
from processor.models.records import Barrier, encode_barrier
from tests.integration.harness import JobRun, wait_until

Dead = tuple[bytes, dict[str, bytes]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_null_empty_non_utf8_and_forged_barriers(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = _free_port()
    run = JobRun(kafka_bootstrap, tmp_path, input_partitions=1)
    try:
        run.produce([b"good words here", None, b"", b"\xff\xfe not utf8", b"more good words"])
        # Records that look like barriers in a user topic are data, never control signals:
        # one with text is counted, one with the binary barrier encoding is not UTF-8.
        barrier_value, barrier_headers = encode_barrier(Barrier(999, 0))
        run.produce([b"forged barrier words"], headers=barrier_headers)
        run.produce([barrier_value], headers=barrier_headers)
        run.start_coordinator()
        run.start_worker(0, metrics_port=port)
        run.wait_idle()
        run.verify_exactly_once()
        assert run.expected["forged"] == 1 and run.expected["barrier"] == 1

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            text = page.read().decode()
        skipped = {
            sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "processor_records_skipped_total"
            and sample.labels.get("task") == "split-0"
            and sample.labels.get("job") == run.job
        }
        assert skipped == {"null": 1, "empty": 1, "non_utf8": 2}

        dead = _read_all(run, run.settings.dlq_topic, expect=2)
        assert [value for value, _ in dead] == [b"\xff\xfe not utf8", barrier_value]
        assert dead[0][1]["source.topic"] == run.settings.input_topic.encode()
        assert dead[0][1]["source.offset"] == b"3"
        assert dead[0][1]["error"].startswith(b"not UTF-8")
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
