"""Which Kafka cluster a job's PostgreSQL writers answer to.

A writer is named ``<job>.<task>.<sink>`` (`processor.sinks.postgres.prepared.owner`), and its
prepared transactions are resolved by the checkpoint its task committed in Kafka. Two Kafka
clusters running jobs of one name into one database would share writers: each would resolve
the other's prepared transactions by its own checkpoints (a row lost or written twice) and
raise the other's fences. So the first task of a job to start in a database claims the job's
name for its cluster, with a row ``<job>@<cluster id>`` in processor_sink_fences (its table,
on which the least-privilege role already has DML; a job name has no ``@``). A task of the
same name on another cluster refuses to start, with one line that says what to do.

Two clusters starting at once both see both claims, and both refuse: the operator deletes the
claim of the one that should not write there. A job moved to a new cluster does the same,
once its old cluster's prepared transactions are resolved (``processor postgres prepared``).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from processor.errors import OutsideFailure

SEPARATOR = "@"


class ClaimedElsewhere(OutsideFailure):
    """The job's name in this database belongs to another Kafka cluster (one line)."""


def claim(conn: psycopg.Connection[Any], fences: str, job: str, cluster: str) -> None:
    """Claim ``job`` in the database of ``conn`` for Kafka cluster ``cluster``, or raise
    `ClaimedElsewhere` if another cluster holds it. ``fences``: the fence table's name."""
    table = sql.Identifier(fences)
    prefix = job + SEPARATOR
    ours = prefix + cluster
    read = sql.SQL("SELECT writer FROM {} WHERE starts_with(writer, %s)").format(table)
    claims = [r[0] for r in conn.execute(read, (prefix,)).fetchall()]
    if not claims:
        add = sql.SQL("INSERT INTO {} (writer, fence) VALUES (%s, 0) ON CONFLICT DO NOTHING")
        conn.execute(add.format(table), (ours,))
        claims = [r[0] for r in conn.execute(read, (prefix,)).fetchall()]
    others = sorted(c.removeprefix(prefix) for c in claims if c != ours)
    if others:
        where = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
        raise ClaimedElsewhere(
            f"job {job} writes into the PostgreSQL database at {where} from Kafka cluster "
            f"{', '.join(others)}, and this task runs on cluster {cluster}: give this job "
            f"another name, or, if that cluster's job is gone and its prepared transactions "
            f"resolved, DELETE FROM {fences} WHERE writer = '{prefix}{others[0]}' "
            "(docs/postgres.md: One job name, one Kafka cluster)"
        )
