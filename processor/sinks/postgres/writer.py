"""Exactly-once rows in PostgreSQL: a task's epoch prepared at its checkpoint, committed
after its Kafka transaction.

At checkpoint n a task with ``sink_postgres`` writes the epoch's rows (`PostgresSinks.prepare`)
in one database transaction per sink and prepares it (``PREPARE TRANSACTION``), before its
Kafka transaction n commits; once that has, it commits the prepared one (`commit`). A declined
checkpoint rolls it back and its rows go again into the next (`decline`). On restart the
committed Kafka offsets decide (`recover`). Why this is exactly once, zombies included, is
in `processor.sinks.postgres.prepared`, which holds the decision; this module is its I/O.

A row the database refuses (a wrong type, a NUL in text, a constraint) is a dead record with
the value it came from: the epoch is written again row by row, each in a savepoint, to find
which. A deferred constraint fails only at PREPARE and names no row: then every row of the
epoch is dead, with its error. A table that is missing, or not writable, fails the task (it
retries), never a row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from processor import faults
from processor.api.postgres import PostgresTarget, Rows, merge_row
from processor.engine.dead import dead_record
from processor.sinks.postgres import claim as postgres_claim
from processor.sinks.postgres import prepared
from processor.sinks.postgres.conn import (
    FENCES,
    GidTaken,
    abort,
    check_server,
    connect,
    ensure_fences,
    lock_waits,
)
from processor.sinks.postgres.conn import (
    ServerNotReady as ServerNotReady,  # the sink's errors, where they were
)

if TYPE_CHECKING:
    from processor.config import Settings
    from processor.engine.chain import StageChain
    from processor.plan.stages import Stage

log = logging.getLogger(__name__)

# A writer's row starts at the server's clock in ms, not at 0: one deleted and made again
# starts above every number the old one reached (one per restart, far fewer than the
# milliseconds between), so no zombie of an older incarnation passes its check again.
_ADD_FENCE = sql.SQL(
    "INSERT INTO {} (writer, fence) VALUES"
    " (%s, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) ON CONFLICT DO NOTHING"
).format(sql.Identifier(FENCES))
_READ_FENCE = sql.SQL("SELECT fence FROM {} WHERE writer = %s").format(sql.Identifier(FENCES))
_RAISE_FENCE = sql.SQL(
    "UPDATE {} SET fence = fence + 1 WHERE writer = %s AND fence = %s RETURNING fence"
).format(sql.Identifier(FENCES))
_CHECK_FENCE = sql.SQL("UPDATE {} SET checkpoint = %s WHERE writer = %s AND fence = %s").format(
    sql.Identifier(FENCES)
)
# A writer's prepared transactions are its role's: one another role prepared under a name
# like them is not (the job could neither commit nor roll it back), and is left alone.
_PREPARED = (
    "SELECT gid, owner = current_user FROM pg_prepared_xacts"
    " WHERE database = current_database() AND starts_with(gid, %s)"
)
_WRITERS = sql.SQL("SELECT writer FROM {} WHERE starts_with(writer, %s)").format(
    sql.Identifier(FENCES)
)

# Errors that are a row's fault: the row is dead, the others are written.
_ROW_ERRORS: tuple[type[Exception], ...] = (
    errors.DataError,
    errors.IntegrityError,
    errors.UndefinedColumn,
    errors.DatatypeMismatch,
    psycopg.ProgrammingError,  # client-side: a value psycopg cannot adapt
)
# Errors of the table, not of a row: the task fails and retries (an operator must act).
_TABLE_ERRORS: tuple[type[Exception], ...] = (
    errors.UndefinedTable,
    errors.InsufficientPrivilege,
    errors.InvalidColumnReference,  # no unique index on the key columns
    errors.InvalidSchemaName,
)

Dead = Callable[[Exception, Any], None]
# A row the database refused: its key columns' values, the error, the value it came from.
Refuse = Callable[[tuple[Any, ...], Exception, Any], None]


class Fenced(RuntimeError):
    """A newer incarnation of this task raised the fence: this one is a zombie."""


class PostgresWriter:
    """One task's writes into one sink's table, with its prepared transactions."""

    def __init__(self, writer: str, target: PostgresTarget) -> None:
        self.writer = writer
        self.target = target
        self._conn: psycopg.Connection[Any] | None = None
        self._seen = 0  # the fence before this incarnation's producer started
        self._fence = 0  # this incarnation's
        # Prepared, not yet committed: checkpoint -> its rows (written again if declined).
        self.outstanding: dict[int, Rows] = {}
        self._statements: dict[tuple[str, ...], sql.Composed] = {}
        # What its restores did with prepared transactions: (COMMIT or ROLLBACK, gid).
        self.resolved: list[tuple[str, str]] = []

    @staticmethod
    def for_dsn(writer: str, dsn: str) -> PostgresWriter:
        """A writer that only resolves and fences (it writes no rows): a replaced one."""
        return PostgresWriter(writer, PostgresTarget(dsn, (), (), _no_row))

    def has_prepared(self) -> bool:
        """Whether the database holds a transaction this writer prepared."""
        return bool(self._prepared(self._connection()))

    def _prepared(self, conn: psycopg.Connection[Any]) -> list[str]:
        """This writer's prepared transactions: its role's, under its names."""
        mine = []
        for gid, own in conn.execute(_PREPARED, (self.writer + ".",)).fetchall():
            if prepared.parse(self.writer, gid) is None:
                continue
            if own:
                mine.append(gid)
            else:
                log.warning("%s: %s was prepared by another role: left alone", self.writer, gid)
        return mine

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            self._conn = connect(self.target.dsn, self.writer)
        return self._conn

    def _table(self) -> str:
        return ".".join(self.target.table)

    def read_fence(self) -> None:
        """Step (1) of the restore (`processor.sinks.postgres.prepared`), before the task's
        producer starts: the fence as its predecessors left it."""
        conn = self._connection()
        check_server(conn)
        with lock_waits(self.writer, FENCES):
            ensure_fences(conn)
            # A plain read: the row may be locked by a transaction a predecessor prepared.
            row = conn.execute(_READ_FENCE, (self.writer,)).fetchone()
            if row is None:  # the writer's first start
                conn.execute(_ADD_FENCE, (self.writer,))
                row = conn.execute(_READ_FENCE, (self.writer,)).fetchone()
                assert row is not None
        self._seen = int(row[0])

    def claim(self, job: str, cluster: str) -> None:
        """After `read_fence`: claim ``job`` in this database for Kafka cluster ``cluster``
        (`processor.sinks.postgres.claim`)."""
        postgres_claim.claim(self._connection(), FENCES, job, cluster)

    def recover(self, committed: int) -> None:
        """Steps (4) and (5), with the predecessors fenced in Kafka and ``committed`` the
        checkpoint the task's committed offsets name: resolve the prepared transactions of
        older incarnations, then raise the fence."""
        conn = self._connection()
        for _ in range(120):
            self._resolve(conn, committed)
            try:
                with conn.transaction():
                    # A transaction prepared meanwhile holds the row: resolve it, try again.
                    conn.execute("SET LOCAL lock_timeout = '1s'")
                    row = conn.execute(_RAISE_FENCE, (self.writer, self._seen)).fetchone()
            except errors.LockNotAvailable:
                with lock_waits(self.writer, FENCES):
                    row = conn.execute(_READ_FENCE, (self.writer,)).fetchone()
                if row is not None and int(row[0]) != self._seen:
                    raise Fenced(
                        f"{self.writer}: a newer incarnation raised its fence meanwhile"
                    ) from None
                continue
            if row is None:
                raise Fenced(f"{self.writer}: a newer incarnation raised its fence meanwhile")
            self._fence = int(row[0])
            return
        with lock_waits(self.writer, FENCES):  # the row held for 2 minutes: one line
            raise errors.LockNotAvailable(f"could not raise its fence in {FENCES}")

    def _resolve(self, conn: psycopg.Connection[Any], committed: int) -> None:
        decision = prepared.resolve(self.writer, self._prepared(conn), committed, self._seen)
        for verb, names in (("COMMIT", decision.commit), ("ROLLBACK", decision.rollback)):
            for name in names:
                try:
                    conn.execute(sql.SQL(verb + " PREPARED {}").format(sql.Literal(name)))
                except errors.UndefinedObject:
                    continue  # resolved meanwhile (by the incarnation that prepared it)
                self.resolved.append((verb, name))
                log.info("%s: %s PREPARED %s (checkpoint %d)", self.writer, verb, name, committed)

    def prepare(self, checkpoint_id: int, rows: Rows, dead: Dead) -> int:
        """Write ``rows`` and prepare them as checkpoint ``checkpoint_id``'s transaction;
        returns how many rows it holds (those refused went to ``dead``)."""
        if not rows:
            return 0
        with lock_waits(self.writer, self._table()):
            return self._prepare(checkpoint_id, rows, dead)

    def _prepare(self, checkpoint_id: int, rows: Rows, dead: Dead) -> int:
        conn = self._connection()
        refused: list[tuple[Any, ...]] = []
        try:
            self._write(conn, checkpoint_id, rows, None)
        except BaseException as exc:
            abort(conn)
            if not isinstance(exc, _ROW_ERRORS) or isinstance(exc, _TABLE_ERRORS):
                raise

            def refuse(ident: tuple[Any, ...], exc: Exception, value: Any) -> None:
                refused.append(ident)
                dead(exc, value)

            try:  # which rows? each in a savepoint
                self._write(conn, checkpoint_id, rows, refuse)
            except BaseException as again:
                abort(conn)
                if not isinstance(again, _ROW_ERRORS) or isinstance(again, _TABLE_ERRORS):
                    raise
                # Every row passed alone and PREPARE still failed: a deferred constraint,
                # which names no row. The epoch's rows are dead, and its transaction holds the
                # fence alone, rather than fail at every restart.
                self._refuse_all(conn, checkpoint_id, rows, refused, again, refuse)
        # A refused row is dead once: it is not written again if the checkpoint is declined.
        kept = dict(rows)
        for ident in refused:
            del kept[ident]
        self.outstanding[checkpoint_id] = kept
        return len(kept)

    def _refuse_all(
        self,
        conn: psycopg.Connection[Any],
        checkpoint_id: int,
        rows: Rows,
        refused: list[tuple[Any, ...]],
        exc: Exception,
        refuse: Refuse,
    ) -> None:
        """Each of ``rows`` not refused yet dead with ``exc``; the epoch prepared empty."""
        log.error("%s: checkpoint %d's rows fail at PREPARE: %s", self.writer, checkpoint_id, exc)
        for ident, (_, value) in rows.items():
            if ident not in refused:
                refuse(ident, exc, value)
        try:
            self._write(conn, checkpoint_id, {}, None)
        except BaseException:
            abort(conn)
            raise

    def _write(
        self, conn: psycopg.Connection[Any], checkpoint_id: int, rows: Rows, refuse: Refuse | None
    ) -> None:
        """One transaction: the fence, the rows (all at once, or with ``refuse`` one by one
        in savepoints), PREPARE TRANSACTION."""
        conn.execute("BEGIN")
        if conn.execute(_CHECK_FENCE, (checkpoint_id, self.writer, self._fence)).rowcount != 1:
            conn.execute("ROLLBACK")
            raise Fenced(
                f"{self.writer}: its fence in {FENCES} is not its own any more (a newer "
                "incarnation raised it, or the row was changed)"
            )
        groups: dict[tuple[str, ...], list[tuple[tuple[Any, ...], list[Any], Any]]] = {}
        for ident, (row, value) in rows.items():
            params = [_param(v) for v in row.values()]
            groups.setdefault(tuple(row), []).append((ident, params, value))
        with conn.cursor() as cur:
            for columns, items in groups.items():
                statement = self._statement(columns)
                if refuse is None:
                    cur.executemany(statement, [params for _, params, _ in items])
                    continue
                for ident, params, value in items:
                    cur.execute("SAVEPOINT row")
                    try:
                        cur.execute(statement, params)
                    except _TABLE_ERRORS:
                        raise
                    except _ROW_ERRORS as exc:
                        cur.execute("ROLLBACK TO SAVEPOINT row")
                        refuse(ident, exc, value)
                        continue
                    cur.execute("RELEASE SAVEPOINT row")
        name = prepared.gid(self.writer, self._fence, checkpoint_id)
        try:
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(name)))
        except errors.OutOfMemory as exc:  # every prepared transaction's slot is taken
            raise ServerNotReady(
                f"{self.writer}: PREPARE TRANSACTION refused: {exc.diag.message_primary} "
                "(max_prepared_transactions; pg_prepared_xacts shows whose); the task retries"
            ) from None
        except errors.DuplicateObject:  # not a row's fault: another session's doing
            raise GidTaken(
                f"{self.writer}: another session prepared a transaction named {name}, the "
                f"one checkpoint {checkpoint_id}'s was to have (pg_prepared_xacts); the task "
                "restarts under a new fence"
            ) from None

    def _statement(self, columns: tuple[str, ...]) -> sql.Composed:
        """The upsert of a row with ``columns`` (a row that exists gets the other columns)."""
        statement = self._statements.get(columns)
        if statement is None:
            keys = self.target.key_columns
            others = [c for c in columns if c not in keys]
            action = (
                sql.SQL("DO UPDATE SET {}").format(
                    sql.SQL(", ").join(
                        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in others
                    )
                )
                if others
                else sql.SQL("DO NOTHING")
            )
            upsert = sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) {a}")
            statement = upsert.format(
                t=sql.Identifier(*self.target.table),
                cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
                vals=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                keys=sql.SQL(", ").join(map(sql.Identifier, keys)),
                a=action,
            )
            self._statements[columns] = statement
        return statement

    def commit(self, checkpoint_id: int) -> None:
        """Kafka committed checkpoint ``checkpoint_id``: commit what was prepared up to it."""
        if not self.outstanding:
            return
        conn = self._connection()
        for n in sorted(n for n in self.outstanding if n <= checkpoint_id):
            name = prepared.gid(self.writer, self._fence, n)
            conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(name)))
            del self.outstanding[n]

    def decline(self, checkpoint_id: int) -> Rows | None:
        """Checkpoint ``checkpoint_id`` is declined: roll back its prepared transaction and
        return its rows, for the next epoch."""
        rows = self.outstanding.pop(checkpoint_id, None)
        if rows is not None:
            name = prepared.gid(self.writer, self._fence, checkpoint_id)
            self._connection().execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(name)))
        return rows

    def settle(self, committed: int) -> None:
        """A clean stop, every Kafka transaction of the task above ``committed`` aborted or
        never to commit: commit what was prepared up to it, roll back the rest, so that
        nothing stays prepared (its row locks would hold the next writer back)."""
        self.commit(committed)
        for checkpoint_id in sorted(self.outstanding):
            self.decline(checkpoint_id)
            log.info("%s: rolled back checkpoint %d at stop", self.writer, checkpoint_id)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _no_row(key: Any, value: Any) -> dict[str, Any]:
    raise AssertionError("a writer that only resolves writes no rows")


def _param(value: Any) -> Any:
    """A row's value as psycopg takes it: a dict as jsonb (lists are arrays already)."""
    return Jsonb(value) if type(value) is dict else value


class PostgresSinks:
    """The PostgreSQL sinks of one task: what its checkpoints do with them.

    ``owner``: the task's job, its id and the job's stage names, to find the writers it
    replaces (`prepared.replaced`): those of a sink renamed or removed since it last ran.
    Their restore is the task's own, so their prepared transactions are resolved as its own.
    """

    def __init__(
        self,
        writers: dict[str, PostgresWriter],
        owner: tuple[str, str, tuple[str, ...]] = ("", "", ()),
    ) -> None:
        self.writers = writers
        self.owner = owner
        self.replaced: list[PostgresWriter] = []  # from read_fences to recover

    @staticmethod
    def of(
        settings: Settings, task_id: str, stage: Stage, stages: Iterable[str] = ()
    ) -> PostgresSinks | None:
        """The task's, or None if its stage writes into no PostgreSQL table (no cost)."""
        writers = {}
        for node in stage.postgres_sinks:
            assert node.postgres is not None
            writer = prepared.owner(settings.job_name, task_id, node.name)
            writers[node.name] = PostgresWriter(writer, node.postgres)
        owner = (settings.job_name, task_id, tuple(stages) or (stage.name,))
        return PostgresSinks(writers, owner) if writers else None

    def writers_of(self, job: str) -> list[PostgresWriter]:
        """Writers of this task in job ``job`` (this one, or the one it started from) that
        it does not have now, in the databases it writes into (their fences say which)."""
        found: list[PostgresWriter] = []
        names = {w.writer for w in self.writers.values()}
        _, task, stages = self.owner
        targets = {w.target.dsn: w.target for w in self.writers.values()}
        for target in targets.values():
            with (
                connect(target.dsn, f"{job}.{task}") as conn,
                lock_waits(f"{job}.{task}", FENCES),
            ):
                ensure_fences(conn)
                rows = conn.execute(_WRITERS, (f"{job}.{task}.",)).fetchall()
            gone = prepared.replaced(job, task, names, stages, (r[0] for r in rows))
            found.extend(PostgresWriter.for_dsn(name, target.dsn) for name in gone)
        return found

    def read_fences(self, cluster: str | None = None) -> None:
        """Before the task's producer starts (`PostgresWriter.read_fence`): its writers',
        and those of the writers it replaces. ``cluster``: the Kafka cluster's id, which
        must be the one the job's name is claimed for in each database (`postgres_claim`)."""
        claimed: set[str] = set()
        for writer in self.writers.values():
            writer.read_fence()
            if cluster and self.owner[0] and writer.target.dsn not in claimed:
                writer.claim(self.owner[0], cluster)
                claimed.add(writer.target.dsn)
        self.replaced = self.writers_of(self.owner[0]) if self.owner[0] else []
        for writer in self.replaced:
            writer.read_fence()
            log.info("%s: replaces writer %s", self.owner[1], writer.writer)

    def recover(self, committed: int) -> None:
        """Steps (4) and (5) for its writers and those it replaces (then closed: they have
        nothing more to do, and a zombie of theirs finds its fence raised)."""
        for writer in self.writers.values():
            writer.recover(committed)
        replaced, self.replaced = self.replaced, []
        for writer in replaced:
            try:
                writer.recover(committed)
            finally:
                writer.close()

    def prepare(self, checkpoint_id: int, chain: StageChain, task_id: str) -> int:
        """The epoch's rows of every sink, prepared; refused rows into the chain's dead
        records. Returns the rows written."""
        written = 0
        rows_of = chain.take_rows()
        for name, rows in rows_of.items():
            written += self.writers[name].prepare(
                checkpoint_id, rows, partial(_refused, chain, name)
            )
        if any(checkpoint_id in w.outstanding for w in self.writers.values()):
            faults.reach("postgres_prepared", task_id)
        return written

    def commit(self, checkpoint_id: int, task_id: str) -> None:
        """Kafka committed checkpoint ``checkpoint_id``: COMMIT PREPARED."""
        if any(w.outstanding for w in self.writers.values()):
            faults.reach("postgres_committing", task_id)
        for writer in self.writers.values():
            writer.commit(checkpoint_id)

    def decline(self, checkpoint_id: int, chain: StageChain) -> None:
        """Roll back the declined checkpoint's transactions; their rows go first into the
        next epoch's (a newer row of the same key merges into its own, `merge_row`)."""
        for name, writer in self.writers.items():
            rows = writer.decline(checkpoint_id)
            if rows:
                for ident, (row, value) in chain.rows.get(name, {}).items():
                    merge_row(rows, ident, row, value)
                chain.rows[name] = rows

    def settle(self, committed: int) -> None:
        """A clean stop (`PostgresWriter.settle`)."""
        for writer in self.writers.values():
            writer.settle(committed)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def _refused(chain: StageChain, operator: str, exc: Exception, value: Any) -> None:
    """A row the database refused: a dead record of the sink ``operator`` (no source value
    of a batch: the epoch is over)."""
    chain.dead.append(dead_record(operator, exc, value, None))
