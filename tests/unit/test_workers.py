"""Under pytest-xdist every worker's fixed test ports and test network are its own."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from tests.workers import LONGEST_FILES, MAX_WORKERS, longest_first, worker_index, worker_port

# Every fixed port block of the suite at worker 0: (first port, how many), a cluster's
# controllers as a block of their own (processor/localkafka/cluster.py: CONTROLLER_OFFSET 100).
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
    "bench/nexmark.py (test_nexmark_bench)": (20292, 2),
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


def test_ports_moved_ten_apart_stay_apart_in_two_workers() -> None:
    # PROCESSOR_TEST_KAFKA_PORT=P, _PG_PORT=P+10, _S3_PORT=P+20, _CHAOS_PORT=P+30 and
    # _CHAOS_S3_PORT=P+40, as sessions side by side set them, under deploy/test.sh's 2 workers.
    moved = {"kafka": (21000, 2), "postgres": (21010, 2), "s3": (21020, 2)}
    moved |= {"chaos broker": (21030, 2), "chaos s3": (21040, 3)}
    owner: dict[int, tuple[str, int]] = {}
    for (name, (base, width)), index in itertools.product(moved.items(), range(2)):
        for port in range(worker_port(base, index), worker_port(base, index) + width):
            assert port not in owner, f"{name} on gw{index} and {owner[port]} both use {port}"
            owner[port] = (name, index)


@dataclasses.dataclass
class Item:
    nodeid: str


def test_the_longest_files_come_first_and_the_rest_as_they_came() -> None:
    first, second = LONGEST_FILES[0], LONGEST_FILES[1]
    items = [
        Item("tests/unit/test_a.py::test_one"),
        Item(f"{second}::test_x"),
        Item("tests/unit/test_b.py::test_two"),
        Item(f"{first}::test_y[1]"),
        Item(f"{second}::test_z"),
        Item(f"{first}::test_y[2]"),
        Item("tests/unit/test_a.py::test_three"),
    ]
    assert [item.nodeid for item in longest_first(items)] == [
        f"{first}::test_y[1]",
        f"{first}::test_y[2]",
        f"{second}::test_x",
        f"{second}::test_z",
        "tests/unit/test_a.py::test_one",
        "tests/unit/test_b.py::test_two",
        "tests/unit/test_a.py::test_three",
    ]


def test_every_listed_file_is_there_once() -> None:
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
    root = Path(__file__).resolve().parents[2]
    assert [path for path in LONGEST_FILES if not (root / path).is_file()] == []
