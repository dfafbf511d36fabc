"""Under pytest-xdist every worker's fixed test ports and test network are its own."""

from __future__ import annotations

import itertools

import pytest

from tests.workers import MAX_WORKERS, worker_index, worker_port

# Every fixed port block of the suite at worker 0: (first port, how many), a cluster's
# controllers as a block of their own (processor/kafka/cluster.py: CONTROLLER_OFFSET 100).
BLOCKS = {
    "postgres (session, +1 for the settings tests)": (15432, 2),
    "s3 (session, +1 for the outage test)": (18333, 2),
    "kafka (session)": (19092, 2),
    "test_broker_trouble": (19192, 2),
    "chaos broker": (19292, 2),
    "chaos s3 / test_sasl (+2 SASL)": (19392, 3),
    "test_cluster brokers": (19492, 3),
    "test_cluster controllers": (19592, 3),
    "test_eos brokers": (19692, 3),
    "test_eos controllers": (19792, 3),
    "chaos cluster brokers": (19892, 3),
    "chaos cluster controllers": (19992, 3),
    "test_acls (session + 1100, +2 SASL)": (20192, 3),
    "bench (test_bench)": (29092, 2),
}


def test_worker_index_comes_from_xdist() -> None:
    assert worker_index("") == 0
    assert worker_index("gw0") == 0
    assert worker_index("gw3") == 3
    with pytest.raises(ValueError):
        worker_index("master")
    with pytest.raises(ValueError):
        worker_index(f"gw{MAX_WORKERS}")


def test_no_two_workers_share_a_port() -> None:
    owner: dict[int, tuple[str, int]] = {}
    for (name, (base, width)), index in itertools.product(BLOCKS.items(), range(MAX_WORKERS)):
        for port in range(worker_port(base, index), worker_port(base, index) + width):
            assert port not in owner, f"{name} on gw{index} and {owner[port]} both use {port}"
            assert port < 32768, f"{name} on gw{index}: {port} is in the ephemeral range"
            owner[port] = (name, index)
