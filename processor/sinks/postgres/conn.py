"""The PostgreSQL sink's connections, and what it makes of a server or a session that
stands in its way: one line each, a task that fails and retries, never one that waits
forever (`processor.sinks.postgres.writer` writes through them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors, sql

from processor.errors import OutsideFailure

# One row per writer (job, task, sink): the fence each incarnation raises at its restore.
FENCES = "processor_sink_fences"
_CREATE_FENCES = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} (writer text PRIMARY KEY, fence bigint NOT NULL,"
    " checkpoint bigint NOT NULL DEFAULT 0)"
).format(sql.Identifier(FENCES))

# How long a statement waits for a lock another session holds (an application's transaction
# on the table, one prepared and left behind, a LOCK TABLE) before the task fails, and
# retries. Every connection of the sink has it: nothing waits forever.
LOCK_TIMEOUT_S = 60


class ServerNotReady(OutsideFailure):
    """The server is set up so that the sink cannot work (one line: the setting)."""


class Locked(OutsideFailure):
    """Another session held a lock the sink needed for longer than LOCK_TIMEOUT_S."""


class GidTaken(OutsideFailure):
    """Another session prepared a transaction under the id this epoch's was to have."""


def connect(dsn: str, name: str) -> psycopg.Connection[Any]:
    """A connection of writer ``name``: autocommit (its transactions are explicit: BEGIN ...
    PREPARE TRANSACTION), and no statement waits longer than LOCK_TIMEOUT_S for a lock."""
    return psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=10,
        application_name=f"processor {name}"[:63],
        options=f"-c lock_timeout={LOCK_TIMEOUT_S}s",
    )


@contextlib.contextmanager
def lock_waits(writer: str, table: str) -> Iterator[None]:
    """A lock another session held past ``lock_timeout``, as one line: `Locked`."""
    try:
        yield
    except errors.LockNotAvailable as exc:
        where = (exc.diag.context or "").strip().splitlines()
        raise Locked(
            f"{writer}: waited {LOCK_TIMEOUT_S} s (lock_timeout) for a lock another session "
            f"holds on {table} or {FENCES} ({where[0] if where else exc})"
            ": an open or prepared transaction (pg_locks, pg_prepared_xacts) or a LOCK "
            "TABLE; the task retries"
        ) from None


def check_server(conn: psycopg.Connection[Any]) -> None:
    """At the task's start, not at its first epoch with rows: PREPARE TRANSACTION fails on
    a server whose max_prepared_transactions is 0 (PostgreSQL's default)."""
    row = conn.execute("SHOW max_prepared_transactions").fetchone()
    if row is not None and int(row[0]) == 0:
        where = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
        raise ServerNotReady(
            f"max_prepared_transactions is 0 on the PostgreSQL server at {where}: the "
            "sink needs it above 0, at least the tasks writing into it (it takes a server "
            "restart; docs/postgres.md: What the server needs)"
        )


def ensure_fences(conn: psycopg.Connection[Any]) -> None:
    """Create processor_sink_fences if it does not exist. Looked for first: CREATE TABLE IF
    NOT EXISTS needs CREATE on the schema even when the table is there, which a role with
    only DML on the two tables lacks (docs/postgres.md)."""
    row = conn.execute("SELECT to_regclass(%s)", (FENCES,)).fetchone()
    if row is not None and row[0] is not None:
        return
    with contextlib.suppress(errors.UniqueViolation):  # another task made it just now
        conn.execute(_CREATE_FENCES)


def abort(conn: psycopg.Connection[Any]) -> None:
    """Roll back the transaction under way, if the connection still has one."""
    status = conn.info.transaction_status
    if status in (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR):
        conn.execute("ROLLBACK")
