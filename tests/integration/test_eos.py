"""Kafka Streams' own exactly-once system test, ported (tests/eos), short: on a three-broker
cluster (RF 3, min ISR 2), three workers, one bounced cleanly (SIGTERM) and one killed
(``kill -9``) while the idempotent driver writes; every record of ``echo`` and of the four
per-record aggregates verified by an independent read_committed reader, and no transaction
of the job left open."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from processor.localkafka import cluster
from processor.localkafka.cluster import LocalCluster
from tests.eos.run import EosRun, Plan
from tests.eos.verify import report
from tests.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(480)]

# Below Linux's ephemeral range and away from every other test's ports (tests/conftest.py,
# test_cluster.py); the controllers take P+100 to P+102.
PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_EOS_PORT", "19692")))
RECORDS = 3000


def test_kafkas_eos_test_with_a_bounce_and_a_kill(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka"
    nodes = LocalCluster(nodes=3, port=PORT, data_dir=data_dir, heap="384m")
    nodes.start(timeout=300)
    # 60 s of input at 50 records a second: the faults land while it is written. Three
    # partitions, not Kafka's five: nine tasks (each a transactional producer) for two cores.
    plan = Plan(records=RECORDS, rate=50, bounces=1, kills=1, seed=3, partitions=3)
    try:
        outcome = EosRun(nodes.bootstrap, tmp_path / "job", plan, replication_factor="3").run(
            log=False
        )
    finally:
        gc.collect()  # no client of the run keeps reconnecting to the stopped brokers
        assert cluster.main(["stop", "--port", str(PORT), "--data-dir", str(data_dir)]) == 0
    report(outcome.result)
    result = outcome.result
    assert result.ok, result.line
    assert sorted(kind for _, kind, _, _ in outcome.faults) == ["bounce", "kill"]
    # Both while the driver wrote: each worker's replacement takes over mid-stream.
    assert all(0 < sent < RECORDS for _, _, _, sent in outcome.faults), outcome.faults
    assert result.inputs == RECORDS
    assert result.tally.verified == RECORDS * 5  # echo, min, sum, max and cnt
    assert result.open_transactions == [] and result.unstable == []
