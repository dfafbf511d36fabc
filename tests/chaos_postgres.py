"""The chaos run's PostgreSQL sink (``python -m tests.chaos --postgres``): word count whose
counts go both to a Kafka topic and, from the same operator and so in the same transactions,
into a PostgreSQL table, on a server this run starts (tests/postgres_server.py).

Besides the Kafka sink's checks against the reference execution, the table must hold the
exact count of every word; every write that committed (a trigger logs them in order) must
be exactly the sequence of updates the operator committed to Kafka, so a write committed
twice, lost, or of an epoch Kafka aborted shows; and no prepared transaction may be left.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import psycopg

from processor import Pipeline
from processor.commands.counts import read_updates
from tests import postgres_server
from tests.chaos_summary import Summary
from tests.integration.harness import JobRun
from tests.integration.postgres_pipeline import TABLES

ENV = "PROCESSOR_TEST_PG_SINK_DSN"
DSN = os.environ.get(ENV, "postgresql://unset@127.0.0.1/unset")
COUNTS = "chaos-counts"


def build() -> Pipeline:
    p = Pipeline()
    counts = p.source("chaos-lines").flat_map(str.split).key_by(str).count()
    counts.sink(COUNTS)
    counts.sink_postgres(DSN, "word_counts", ["word"], lambda w, n: {"word": w, "n": n})
    return p


pipeline = build()


class PostgresChaos:
    """The server, its tables, and the checks at the end."""

    def __init__(self, port: int) -> None:
        self.port = port
        # As root the server runs as 'postgres', who needs a directory it may enter.
        self.base = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
        self.base.chmod(0o755)
        self.dsn = postgres_server.start(self.base / "data", port)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(TABLES)

    @property
    def spec(self) -> str:
        return f"{Path(__file__).resolve()}:pipeline"

    def verify(self, run: JobRun, lines: Iterable[str], summary: Summary) -> None:
        words = Counter(w for line in lines for w in line.split())
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT word, n FROM word_counts").fetchall()
            table: dict[str, int] = {w: int(n) for w, n in rows}
            log: dict[str, list[int]] = {}
            for word, n in conn.execute("SELECT word, n FROM count_log ORDER BY id"):
                log.setdefault(word, []).append(n)
            left = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
        _, updates = read_updates(run.settings, COUNTS, timeout=120)
        kafka = {w: [int(v) for v in values] for w, values in updates.items()}
        summary.lost += sum(1 for w, n in words.items() if table.get(w, 0) < n)
        summary.duplicated += sum(1 for w, n in words.items() if table.get(w, 0) > n)
        summary.unknown += len(table.keys() - words.keys())
        summary.wrong += sum(1 for w in log.keys() | kafka.keys() if log.get(w) != kafka.get(w))
        summary.wrong += left[0] if left else 0
        print(
            f"postgres: {len(table)} rows, {sum(map(len, log.values()))} writes committed, "
            f"{left[0] if left else '?'} prepared left"
        )

    def stop(self) -> None:
        postgres_server.stop(self.base / "data")
        shutil.rmtree(self.base, ignore_errors=True)
