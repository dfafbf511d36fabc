"""Which pytest-xdist worker this process is, and the ports and names that make it its own.

``PROCESSOR_TEST_WORKERS=N bash deploy/test.sh`` runs the suite in N pytest-xdist workers
(gw0, gw1, ...; ``--dist loadfile``: one file's tests on one worker). Each worker starts its
own session broker, S3 server and PostgreSQL, and its tests their own brokers and clusters:
``worker_port(base)`` moves every fixed test port by ``PORT_STRIDE`` per worker. Outside
xdist (and on gw0) the ports are the documented ones.

Why a stride of 10: every fixed test port is a block of at most 5 ports that starts at a base
whose last two digits are the same for all Kafka bases (19092, 19192, ... 19892, 20192,
29092; a cluster's controllers at +100) and unique for S3 (18333) and PostgreSQL (15432).
Worker i's block of base B is B+10i .. B+10i+4, which meets no block of another worker j
(the difference 10(i-j) is never a multiple of 100 for i, j < 10, and never within 5) nor
of another base. tests/unit/test_workers.py checks it over every base and 10 workers.
Worker 9's highest port is 29092 + 90 + 1, well below Linux's ephemeral range (32768).
"""

from __future__ import annotations

import os

PORT_STRIDE = 10
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
