"""``processor postgres prepared``: the prepared transactions in a database, and resolving
the job's (docs/postgres.md: Prepared transactions left behind).

Listing reads the database only. ``--resolve`` resolves the job's as its tasks' restores
would (`processor.worker.postgres_orphans.resolve_task`): commit iff n is at or below the
checkpoint the task's committed offsets name in Kafka, roll back the others. Transactions
of other jobs, and ids that are not a writer's, are listed and left alone.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from processor.config import Settings
from processor.jobs.graph import JobGraph
from processor.sinks.postgres import prepared

_PREPARED = (
    "SELECT gid, prepared, owner FROM pg_prepared_xacts"
    " WHERE database = current_database() ORDER BY prepared"
)


def add_arguments(postgres: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``processor postgres prepared`` in the command line (psycopg imported only if run)."""
    commands = postgres.add_subparsers(dest="postgres_command", required=True, help="prepared")
    listing = commands.add_parser(
        "prepared",
        parents=[common],
        help="list the database's prepared transactions; --resolve the job's",
    )
    listing.add_argument("--dsn", required=True, help="the database: a libpq DSN or URL")
    listing.add_argument(
        "--resolve",
        action="store_true",
        help="commit the job's whose Kafka transaction committed, roll back the others "
        "(a stopped job: a running task is fenced, and restarts)",
    )


@dataclass(frozen=True)
class Prepared:
    """One prepared transaction: its id, when and by which role it was prepared, and its
    writer's row in processor_sink_fences (None: not a writer's transaction id)."""

    gid: str
    prepared_at: str
    role: str
    writer: str | None
    fence: int | None = None
    # The last checkpoint whose transaction committed in the table (not Kafka's decision).
    in_table: int | None = None


def prepared_in(dsn: str) -> list[Prepared]:
    """The database's prepared transactions, oldest first."""
    import psycopg
    from psycopg import sql

    from processor.sinks.postgres.conn import FENCES

    query = sql.SQL("SELECT writer, fence, checkpoint FROM {}").format(sql.Identifier(FENCES))
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(_PREPARED).fetchall()
        exists = conn.execute("SELECT to_regclass(%s)", (FENCES,)).fetchone()
        fences: dict[str, tuple[int, int]] = {}
        if exists is not None and exists[0] is not None:
            fences = {w: (f, c) for w, f, c in conn.execute(query).fetchall()}
    found = []
    for gid, at, role in rows:
        writer = prepared.writer_of(gid)
        fence, in_table = fences.get(writer or "", (None, None))
        found.append(Prepared(gid, at.isoformat(timespec="seconds"), role, writer, fence, in_table))
    return found


def tasks_of(graph: JobGraph, found: list[Prepared]) -> dict[str, list[str]]:
    """The job's writers with prepared transactions, by task."""
    stages = [s.name for s in graph.stages]
    tasks: dict[str, list[str]] = {}
    for item in found:
        task = prepared.task_of(graph.job_name, item.writer or "", stages)
        if task is not None and item.writer not in tasks.get(task, []):
            tasks.setdefault(task, []).append(item.writer or "")
    return tasks


def render(graph: JobGraph, found: list[Prepared]) -> list[str]:
    """One line per prepared transaction, saying whose it is."""
    stages = [s.name for s in graph.stages]
    lines = []
    for item in found:
        task = prepared.task_of(graph.job_name, item.writer or "", stages)
        whose = f"job {graph.job_name}, task {task}" if task else "not this job's"
        if item.writer is None:
            whose = "not a processor transaction id"
        table = "" if item.in_table is None else f", last committed in the table: {item.in_table}"
        lines.append(f"{item.gid}  prepared {item.prepared_at} by {item.role}  ({whose}{table})")
    return lines


def resolve(settings: Settings, graph: JobGraph, dsn: str, found: list[Prepared]) -> list[str]:
    """Resolve the job's prepared transactions, task by task; what was done, one line each.
    Meant for a stopped job: a task that runs is fenced (it fails, and restarts)."""
    from processor.sinks.postgres.writer import PostgresWriter
    from processor.worker.postgres_orphans import resolve_task

    lines = []
    for task, names in sorted(tasks_of(graph, found).items()):
        writers = [PostgresWriter.for_dsn(name, dsn) for name in names]
        committed = resolve_task(settings, graph, task, writers)
        lines.append(f"task {task}: Kafka committed checkpoint {committed}")
        lines.extend(f"  {verb} PREPARED {gid}" for w in writers for verb, gid in w.resolved)
    return lines


def command(settings: Settings, dsn: str, resolve_them: bool) -> int:
    """``processor postgres prepared``: list, and with ``--resolve`` resolve the job's."""
    from processor.jobs import load_graph

    graph = load_graph(settings)
    found = prepared_in(dsn)
    for line in render(graph, found):
        print(line)
    if not found:
        print("no prepared transactions")
    if resolve_them:
        for line in resolve(settings, graph, dsn, found) or ["none of them is this job's"]:
            print(line)
    return 0


def run(args: argparse.Namespace) -> int:
    """``processor postgres prepared``."""
    from processor.commands import base

    return command(base.setup(args), args.dsn, args.resolve)
