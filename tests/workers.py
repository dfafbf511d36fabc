"""Which pytest-xdist worker this process is, and the ports and names that make it its own.

``PROCESSOR_TEST_WORKERS=N bash deploy/test.sh`` runs the suite in N pytest-xdist workers
(gw0, gw1, ...; ``--dist loadfile``: one file's tests on one worker; 2 by default, 1 for one
process). Each worker starts its own session broker, S3 server and PostgreSQL, and its tests
their own brokers and clusters: ``worker_port(base)`` moves every fixed test port by
``PORT_STRIDE`` per worker. Outside xdist (and on gw0) the ports are the documented ones.

Why a stride of 5: every fixed test port is a block of at most 3 ports that starts at a base
whose last two digits are the same for all Kafka bases (19092, 19192, ... 19892, 20192, 20292,
29092; a cluster's controllers at +100) and unique for S3 (18333) and PostgreSQL (15432).
Worker i's block of base B is B+5i .. B+5i+2, which meets no block of another worker j (the
difference 5(i-j) is never a multiple of 100 for i, j < 10, and never within 3) nor of
another base. And bases moved 10 apart (PROCESSOR_TEST_KAFKA_PORT=P, PROCESSOR_TEST_PG_PORT=
P+10, ...) stay apart for 2 workers: a stride of 10 put gw1's broker on gw0's PostgreSQL.
tests/unit/test_workers.py checks both. Worker 9's highest port is 29092 + 45 + 1, well below
Linux's ephemeral range (32768).

``longest_first`` orders the files for the workers: ``--dist loadfile`` hands out files in
the order it gets them (with ``--no-loadscope-reorder``; xdist's own reorder puts the files
with the most tests first, and test_bench, one test of 10 minutes, last of all), so the
longest files start at once and the short ones fill in at the end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, TypeVar

PORT_STRIDE = 5
MAX_WORKERS = 10


def worker_index(name: str | None = None) -> int:
    """0 outside xdist; N on worker ``gwN``."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if name is None else name
    if not name:
        return 0
    if not (name.startswith("gw") and name[2:].isdigit()):
        raise ValueError(f"PYTEST_XDIST_WORKER={name!r}: not gwN")
    index = int(name[2:])
    if index >= MAX_WORKERS:
        raise ValueError(f"{name}: at most {MAX_WORKERS} workers have ports of their own")
    return index


WORKER_INDEX = worker_index()


def worker_port(base: int, index: int = WORKER_INDEX) -> int:
    """``base`` moved into this worker's block."""
    return base + PORT_STRIDE * index


# The test files that take longest, longest first: each file's total (setup, call and teardown
# of all its tests, from --junitxml) in the first run of the default 2 workers on the 2-core
# machine, shared with other sessions (1-min load mean 46; test_broker_trouble hit its 600 s
# timeout). A file not listed comes after these, in collection order.
LONGEST_FILES = (
    "tests/integration/test_bench.py",  # 1165 s
    "tests/integration/test_chaos.py",  # 1102 s
    "tests/integration/test_broker_trouble.py",  # 600 s
    "tests/integration/test_fault_points.py",  # 411 s
    "tests/integration/test_zombie_commit.py",  # 409 s
    "tests/integration/test_nexmark_flink.py",  # 302 s
    "tests/integration/test_loop_jobs.py",  # 301 s
    "tests/integration/test_eos.py",  # 296 s
    "tests/integration/test_acls.py",  # 286 s
    "tests/integration/test_savepoint.py",  # 263 s
    "tests/integration/test_postgres_sink.py",  # 230 s
    "tests/integration/test_keyed_recovery.py",  # 191 s
    "tests/integration/test_s3_checkpoints.py",  # 170 s
    "tests/integration/test_nexmark.py",  # 155 s
    "tests/integration/test_fallback_operators.py",  # 149 s
    "tests/integration/test_snapshot_fallback.py",  # 142 s
    "tests/integration/test_cli.py",  # 124 s
    "tests/integration/test_shuffle_retention.py",  # 121 s
    "tests/integration/test_examples.py",  # 104 s
    "tests/integration/test_cluster.py",  # 92 s
    "tests/integration/test_crash.py",  # 88 s
    "tests/integration/test_query_state.py",  # 81 s
    "tests/integration/test_guarantees.py",  # 76 s
    "tests/integration/test_time.py",  # 72 s
)


class _Item(Protocol):
    @property
    def nodeid(self) -> str: ...


ItemT = TypeVar("ItemT", bound=_Item)


def longest_first(items: Sequence[ItemT]) -> list[ItemT]:
    """``items`` with the files of ``LONGEST_FILES`` first, in its order; the order of the
    tests within a file and of the other files as they came."""
    rank = {path: index for index, path in enumerate(LONGEST_FILES)}
    return sorted(items, key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
