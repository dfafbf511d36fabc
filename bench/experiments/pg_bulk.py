"""The PostgreSQL sink's writer alone: rows/s of an epoch prepared and committed in one
statement (`processor.sinks.postgres.statements.bulk_upsert`) against one statement per row.

    python bench/experiments/pg_bulk.py [--rows 20000] [--rounds 6] [--port 24199]

Starts its own PostgreSQL (tests/postgres_server.py) in /tmp/pg-bulk, writes ``--rows``
two-column rows (text key, bigint) per epoch into one table, the two ways interleaved, and
prints each way's median rows/s with its range.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from processor.api.postgres import PostgresTarget
from processor.sinks.postgres import statements
from processor.sinks.postgres.writer import PostgresWriter
from tests import postgres_server


def _never(rows: Iterable[Mapping[str, Any]], types: Mapping[str, str]) -> str | None:
    return None  # every epoch one statement per row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--port", type=int, default=24199)
    args = parser.parse_args()
    base = Path("/tmp/pg-bulk")
    shutil.rmtree(base, ignore_errors=True)
    dsn = postgres_server.start(base / "data", args.port)
    bulk = statements.rows_json
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE wc (word text PRIMARY KEY, n bigint NOT NULL)")
        target = PostgresTarget.of(dsn, "wc", ["word"], lambda k, v: {"word": k, "n": v})
        writer = PostgresWriter("bench.t-0.s", target)
        writer.read_fence()
        writer.recover(0)
        rates: dict[str, list[float]] = {"one statement": [], "a statement per row": []}
        checkpoint = 0
        for r in range(args.rounds):
            for way in rates:
                statements.rows_json = bulk if way == "one statement" else _never
                rows = {(f"w{i}",): ({"word": f"w{i}", "n": i + r}, i) for i in range(args.rows)}
                checkpoint += 1
                start = time.perf_counter()
                writer.prepare(checkpoint, rows, lambda exc, value: None)
                writer.commit(checkpoint)
                rates[way].append(args.rows / (time.perf_counter() - start))
        for way, values in rates.items():
            print(
                f"{way}: {statistics.median(values):,.0f} rows/s "
                f"({min(values):,.0f}-{max(values):,.0f})"
            )
        writer.close()
    finally:
        statements.rows_json = bulk
        postgres_server.stop(base / "data")


if __name__ == "__main__":
    main()
