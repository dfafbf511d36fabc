"""What other users of the sink's database can do to it, against a real PostgreSQL (issue #41).

The job writes as the least-privileged role of docs/postgres.md (DML on the table and
processor_sink_fences); beside it:

- ``other``: a role that can connect and has no grant: it sees the prepared transactions'
  names, not the rows; it can neither finish the job's transactions nor touch its tables,
  and a transaction it prepares under a writer's name is left alone by the job's restore,
  or, if it takes the name of the job's next epoch, fails the task in one line until the
  task restarts under a new fence;
- ``app``: an application that shares the table (SELECT, UPDATE): a row lock it holds,
  even in a prepared transaction, fails the sink's epoch after lock_timeout, one line, no
  row lost or dead, and the sink writes once it is gone;
- the tables' owner: a fence row raised or deleted fences the running writer (no row
  written twice or lost), and cannot be changed under a prepared transaction; a dropped
  table fails the task until it is back; a dropped column makes the rows dead records.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, errors, sql

from processor.api.postgres import PostgresTarget
from processor.sinks.postgres import conn as postgres_conn
from processor.sinks.postgres.conn import GidTaken, Locked, ServerNotReady
from processor.sinks.postgres.writer import Fenced, PostgresSinks, PostgresWriter
from tests import postgres_server
from tests.conftest import TEST_PG_PORT, postgres_base

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WRITER = "j.t-0.s"
SETUP = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE TABLE t (k text PRIMARY KEY, v integer);
CREATE TABLE processor_sink_fences (
  writer text PRIMARY KEY, fence bigint NOT NULL, checkpoint bigint NOT NULL DEFAULT 0);
GRANT SELECT, INSERT, UPDATE ON t, processor_sink_fences TO {job};
GRANT SELECT, UPDATE ON t TO {app};
"""


@dataclass(frozen=True)
class Roles:
    """DSNs into one database: the job's role, a stranger, an application, the owner."""

    job: str
    other: str
    app: str
    owner: str
    names: dict[str, str]  # "job", "other", "app": the roles' names


@pytest.fixture
def roles(postgres_dsn: str, pg_database: str) -> Iterator[Roles]:
    names = {r: f"{r}_{uuid.uuid4().hex[:12]}" for r in ("job", "other", "app")}
    idents = {r: sql.Identifier(n) for r, n in names.items()}
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for ident in idents.values():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(sql.SQL(SETUP).format(**idents))
    dsns = {r: conninfo.make_conninfo(pg_database, user=n) for r, n in names.items()}
    try:
        yield Roles(dsns["job"], dsns["other"], dsns["app"], pg_database, names)
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            for (gid,) in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            for ident in idents.values():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for ident in idents.values():
                conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def _target(dsn: str) -> PostgresTarget:
    return PostgresTarget.of(dsn, "t", ["k"], lambda k, v: {"k": k, "v": v})


def _rows(*pairs: tuple[str, Any]) -> dict[tuple[Any, ...], tuple[dict[str, Any], Any]]:
    return {(k,): ({"k": k, "v": v}, v) for k, v in pairs}


def _writer(dsn: str, committed: int = 0) -> PostgresWriter:
    """A restored incarnation of the job's writer (Kafka committed ``committed``)."""
    writer = PostgresWriter(WRITER, _target(dsn))
    writer.read_fence()
    writer.recover(committed)
    return writer


def _no_dead(exc: Exception, value: Any) -> None:
    pytest.fail(f"dead record {value!r}: {exc}")


def _table(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT k, v FROM t ORDER BY k").fetchall()


def _fence(dsn: str) -> int:
    """The writer's fence in processor_sink_fences."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT fence FROM processor_sink_fences WHERE writer = %s", (WRITER,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _prepared(dsn: str) -> list[tuple[str, str]]:
    """(gid, role) of the database's prepared transactions."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT gid, owner FROM pg_prepared_xacts WHERE database = current_database()"
            " ORDER BY gid"
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _prepare_as(dsn: str, gid: str, *statements: str) -> None:
    """A transaction of ``statements`` prepared as ``gid`` by the DSN's role, left behind."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        for statement in statements:
            conn.execute(statement)
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))


def _refused(dsn: str, statement: str) -> None:
    """``statement`` as the DSN's role: permission denied. (In a transaction block, as LOCK
    TABLE wants, but for COMMIT and ROLLBACK PREPARED, which refuse one.)"""
    block = not statement.startswith(("COMMIT", "ROLLBACK"))
    with (
        psycopg.connect(dsn, autocommit=not block) as conn,
        pytest.raises(errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


def test_another_role_sees_names_not_rows_and_cannot_finish_the_jobs_transactions(
    roles: Roles,
) -> None:
    """A role with no grant: the prepared transactions' names (job, task, sink, fence,
    checkpoint) and the sessions' application names are visible to it; the rows, the
    fences and the sessions' statements are not; it can neither commit nor roll back the
    job's prepared transaction, nor write, lock, alter or drop the two tables."""
    writer = _writer(roles.job)
    writer.prepare(1, _rows(("a", 1)), _no_dead)
    gid = f"{WRITER}.{_fence(roles.owner)}.1"
    with psycopg.connect(roles.other, autocommit=True) as conn:
        seen = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
        assert seen == [(gid,)]
        activity = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s",
            (f"processor {WRITER}",),
        ).fetchall()
        assert activity == [("<insufficient privilege>",)]
    for statement in (
        "SELECT * FROM t",
        "SELECT * FROM processor_sink_fences",
        "INSERT INTO t VALUES ('x', 1)",
        f"UPDATE processor_sink_fences SET fence = fence + 1 WHERE writer = '{WRITER}'",
        f"DELETE FROM processor_sink_fences WHERE writer = '{WRITER}'",
        "SELECT * FROM t FOR UPDATE",
        "LOCK TABLE processor_sink_fences",
        "ALTER TABLE t DROP COLUMN v",
        "DROP TABLE t",
        f"COMMIT PREPARED '{gid}'",
        f"ROLLBACK PREPARED '{gid}'",
    ):
        _refused(roles.other, statement)
    writer.commit(1)
    assert _table(roles.owner) == [("a", 1)]
    writer.close()


def test_the_jobs_role_can_only_read_and_upsert_the_two_tables(roles: Roles) -> None:
    """What the least-privileged role keeps from whoever holds the job's database login
    (a worker's user code): no delete, truncate, alter, drop or create, no other table."""
    for statement in (
        "DELETE FROM t",
        "TRUNCATE t",
        f"DELETE FROM processor_sink_fences WHERE writer = '{WRITER}'",
        "ALTER TABLE t ADD COLUMN w integer",
        "DROP TABLE processor_sink_fences",
        "CREATE TABLE elsewhere (k text)",
        "SELECT * FROM pg_authid",
    ):
        _refused(roles.job, statement)


def test_a_transaction_another_role_prepared_under_a_writers_name_is_left_alone(
    roles: Roles,
) -> None:
    """A stranger prepares transactions named like the writer's: one its restore would
    commit (fence 0, checkpoint 1, at or below Kafka's 5), and one under the name the next
    epoch is to have. The restore leaves the first alone (it is not the job's role's: the
    job could not finish it); the epoch fails in one line, with no row dead and nothing of
    the job's prepared; the task's next incarnation, under a new fence, writes."""
    _prepare_as(roles.other, f"{WRITER}.0.1")
    writer = _writer(roles.job, committed=5)  # not InsufficientPrivilege at every restart
    assert writer.resolved == []
    taken = f"{WRITER}.{_fence(roles.owner)}.6"  # the names are there for all to read
    _prepare_as(roles.other, taken)
    with pytest.raises(GidTaken) as raised:
        writer.prepare(6, _rows(("a", 1)), _no_dead)
    assert f"named {taken}," in str(raised.value) and "\n" not in str(raised.value)
    writer.close()
    other = roles.names["other"]
    assert _prepared(roles.owner) == sorted([(f"{WRITER}.0.1", other), (taken, other)])
    restarted = _writer(roles.job, committed=5)
    restarted.prepare(6, _rows(("a", 1)), _no_dead)
    restarted.commit(6)
    assert _table(roles.owner) == [("a", 1)]
    restarted.close()


def test_prepared_transactions_filling_the_server_fail_the_epoch_in_one_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A stranger takes every slot of max_prepared_transactions (2 on a server of its own,
    on the session's port + 1): the job's epoch fails in one line naming the setting, no
    row dead; once a slot is free the restarted writer writes."""
    with postgres_base(tmp_path_factory) as base:
        data_dir = base / "data"
        settings = {"max_prepared_transactions": "2"}
        dsn = postgres_server.start(data_dir, TEST_PG_PORT + 1, settings=settings)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
                conn.execute("CREATE ROLE stranger LOGIN")
            stranger = conninfo.make_conninfo(dsn, user="stranger")
            _prepare_as(stranger, "mine-1")
            _prepare_as(stranger, "mine-2")
            writer = _writer(dsn)
            with pytest.raises(ServerNotReady) as raised:
                writer.prepare(1, _rows(("a", 1)), _no_dead)
            message = str(raised.value)
            assert "max_prepared_transactions" in message and "\n" not in message
            writer.close()
            with psycopg.connect(stranger, autocommit=True) as conn:
                conn.execute("ROLLBACK PREPARED 'mine-1'")
            restarted = _writer(dsn)
            restarted.prepare(1, _rows(("a", 1)), _no_dead)
            restarted.commit(1)
            assert _table(dsn) == [("a", 1)]
            restarted.close()
        finally:
            postgres_server.stop(data_dir)


def test_a_row_lock_held_elsewhere_fails_the_epoch_after_lock_timeout(
    roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An application locks a row the sink upserts, in a transaction it prepared and left
    (a lock no session holds: nothing ends it but COMMIT or ROLLBACK PREPARED). The
    epoch fails after lock_timeout (here 1 s) in one line naming it, no row is dead, and
    nothing of the job's is prepared; once the lock is gone the restarted writer writes."""
    monkeypatch.setattr(postgres_conn, "LOCK_TIMEOUT_S", 1)
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES ('a', 0)")
    _prepare_as(roles.app, "app-1", "SELECT * FROM t WHERE k = 'a' FOR UPDATE")
    writer = _writer(roles.job)
    started = time.monotonic()
    with pytest.raises(Locked) as raised:
        writer.prepare(1, _rows(("a", 1), ("b", 2)), _no_dead)
    assert time.monotonic() - started < 10
    message = str(raised.value)
    assert "waited 1 s (lock_timeout)" in message and '"t"' in message and "\n" not in message
    assert [gid for gid, _ in _prepared(roles.owner)] == ["app-1"]
    writer.close()
    with psycopg.connect(roles.app, autocommit=True) as conn:
        conn.execute("ROLLBACK PREPARED 'app-1'")
    restarted = _writer(roles.job)
    restarted.prepare(1, _rows(("a", 1), ("b", 2)), _no_dead)
    restarted.commit(1)
    assert _table(roles.owner) == [("a", 1), ("b", 2)]
    restarted.close()


@pytest.mark.timeout(60)
def test_a_locked_fence_table_fails_the_restore_after_lock_timeout(
    roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner holds processor_sink_fences under LOCK TABLE: a task's restore (its
    writers' fences, then the writers it replaces) fails after lock_timeout, in one line,
    rather than wait for as long as the lock is held."""
    monkeypatch.setattr(postgres_conn, "LOCK_TIMEOUT_S", 1)
    sinks = PostgresSinks({"s": PostgresWriter(WRITER, _target(roles.job))}, ("j", "t-0", ("t",)))
    with psycopg.connect(roles.owner) as owner:
        owner.execute("LOCK TABLE processor_sink_fences")
        for restore in (sinks.read_fences, lambda: sinks.writers_of("j")):
            with pytest.raises(Locked) as raised:
                restore()
            assert "processor_sink_fences" in str(raised.value)
        owner.rollback()
    sinks.read_fences()
    sinks.recover(0)
    sinks.close()


@pytest.mark.parametrize(
    "change",
    [
        f"UPDATE processor_sink_fences SET fence = fence + 1 WHERE writer = '{WRITER}'",
        f"DELETE FROM processor_sink_fences WHERE writer = '{WRITER}'",
    ],
)
def test_a_fence_changed_by_the_owner_fences_the_running_writer(roles: Roles, change: str) -> None:
    """The owner raises or deletes the writer's fence row. Not under a prepared transaction:
    that holds the row (the owner's statement waits; here it gives up after 1 s). Between
    epochs: the running writer's next epoch is refused (Fenced), writing nothing; its next
    incarnation resolves, raises a fence again and writes: no row lost or written twice.
    A row made again starts above the old one's number (the server's clock in ms), so the
    old incarnation, a zombie now, stays fenced after the restart too."""
    writer = _writer(roles.job)
    writer.prepare(1, _rows(("a", 1)), _no_dead)
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '1s'")
        with pytest.raises(errors.LockNotAvailable):
            conn.execute(change)
        writer.commit(1)
        conn.execute(change)
    with pytest.raises(Fenced):
        writer.prepare(2, _rows(("a", 2), ("b", 2)), _no_dead)
    assert _table(roles.owner) == [("a", 1)] and _prepared(roles.owner) == []
    writer.close()
    old = _fence(roles.owner) if change.startswith("UPDATE") else writer._fence
    restarted = _writer(roles.job, committed=1)
    assert _fence(roles.owner) > old
    restarted.prepare(2, _rows(("a", 2), ("b", 2)), _no_dead)
    restarted.commit(2)
    with pytest.raises(Fenced):  # the zombie
        writer.prepare(3, _rows(("a", 3)), _no_dead)
    assert _table(roles.owner) == [("a", 2), ("b", 2)] and _prepared(roles.owner) == []
    restarted.close()
    writer.close()


def test_a_table_dropped_by_the_owner_fails_the_task_until_it_is_back(roles: Roles) -> None:
    """DROP TABLE waits for the job's prepared transaction (here it gives up after 1 s);
    dropped between epochs, the next epoch fails (UndefinedTable), no row dead; once the
    table is back, the restarted writer writes the epoch."""
    writer = _writer(roles.job)
    writer.prepare(1, _rows(("a", 1)), _no_dead)
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '1s'")
        with pytest.raises(errors.LockNotAvailable):
            conn.execute("DROP TABLE t")
        writer.commit(1)
        conn.execute("DROP TABLE t")
    with pytest.raises(errors.UndefinedTable):
        writer.prepare(2, _rows(("b", 2)), _no_dead)
    assert _prepared(roles.owner) == []
    writer.close()
    job_role = sql.Identifier(roles.names["job"])
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE ON t TO {}").format(job_role))
    restarted = _writer(roles.job, committed=1)
    restarted.prepare(2, _rows(("b", 2)), _no_dead)
    restarted.commit(2)
    assert _table(roles.owner) == [("b", 2)]
    restarted.close()


def test_a_column_dropped_by_the_owner_makes_the_rows_dead_records(roles: Roles) -> None:
    """A row naming a column the table no longer has is a bad row (docs/postgres.md): dead,
    with its value and the error, as with an unknown column; not dropped silently."""
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("ALTER TABLE t DROP COLUMN v")
    writer = _writer(roles.job)
    dead: list[tuple[Exception, Any]] = []
    assert writer.prepare(1, _rows(("a", 1), ("b", 2)), lambda e, v: dead.append((e, v))) == 0
    assert sorted(v for _, v in dead) == [1, 2]
    assert all(isinstance(e, errors.UndefinedColumn) for e, _ in dead)
    writer.commit(1)
    with psycopg.connect(roles.owner) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    writer.close()
