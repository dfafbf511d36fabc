"""The session's PostgreSQL server (tests/postgres_server.py, tests/conftest.py): two-phase
commit works across connections, as the exactly-once PostgreSQL sink needs, and a prepared
transaction a test leaves behind does not outlive its database."""

from __future__ import annotations

import uuid

import psycopg
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _gid() -> str:
    # Prepared transactions' ids are unique across the whole server, which tests may share.
    return f"test-{uuid.uuid4().hex}"


def _prepare_insert(dsn: str, gid: str, word: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO words (word) VALUES (%s)", (word,))
        conn.execute(f"PREPARE TRANSACTION '{gid}'")


def test_prepared_transaction_is_committed_from_another_connection(pg_database: str) -> None:
    gid = _gid()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE words (word text PRIMARY KEY)")
    _prepare_insert(pg_database, gid, "prepared")

    with psycopg.connect(pg_database, autocommit=True) as other:
        # Prepared, the row is not yet visible; it outlived the connection that wrote it.
        assert other.execute("SELECT word FROM words").fetchall() == []
        prepared = other.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
        assert prepared == [(gid,)]
        other.execute(f"COMMIT PREPARED '{gid}'")
        assert other.execute("SELECT word FROM words").fetchall() == [("prepared",)]


def test_a_prepared_transaction_left_behind_is_cleaned_up(pg_database: str) -> None:
    # Nothing to assert here: pg_database's teardown must roll it back to drop the database.
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE words (word text PRIMARY KEY)")
    _prepare_insert(pg_database, _gid(), "left behind")
