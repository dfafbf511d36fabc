"""One job name, one Kafka cluster, per database (`processor.sinks.postgres.claim`).

Two Kafka clusters running jobs of one name into one database would share writers and resolve
each other's prepared transactions by their own checkpoints. The first task to start claims
the job's name for its cluster; a task on another cluster refuses with one line, before it
fences or resolves anything. Against a real PostgreSQL server; the cluster id a task claims
with is the real broker's (`test_a_task_claims_with_its_brokers_cluster_id`).
"""

from __future__ import annotations

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from processor.api.postgres import PostgresTarget
from processor.errors import OutsideFailure
from processor.kafka import clients
from processor.sinks.postgres.claim import ClaimedElsewhere
from processor.sinks.postgres.conn import FENCES
from processor.sinks.postgres.writer import PostgresSinks, PostgresWriter

pytestmark = pytest.mark.integration


def _sinks(dsn: str, job: str = "j", task: str = "in-0") -> PostgresSinks:
    target = PostgresTarget.of(dsn, "t", ["k"], lambda _k, r: r)
    return PostgresSinks({"t": PostgresWriter(f"{job}.{task}.t", target)}, (job, task, ("in",)))


def _rows(dsn: str) -> list[tuple[str, int]]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT writer, fence FROM {FENCES} ORDER BY writer").fetchall()
    return [(w, f) for w, f in found]


def test_a_job_of_the_same_name_on_another_cluster_refuses(pg_database: str) -> None:
    """Before: cluster B's task read cluster A's fence, and its restore would have resolved
    A's prepared transactions by B's committed checkpoint (mutation: `claim` returning at
    once fails this test)."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
    first = _sinks(pg_database)
    first.read_fences("cluster-A")
    first.recover(0)
    again = _sinks(pg_database, task="in-1")  # another task of the same job and cluster
    again.read_fences("cluster-A")
    again.recover(0)
    other = _sinks(pg_database)
    with pytest.raises(ClaimedElsewhere) as refused:
        other.read_fences("cluster-B")
    message = str(refused.value)
    assert isinstance(refused.value, OutsideFailure)  # one line, the task retries
    assert "\n" not in message and "cluster-A" in message and "cluster-B" in message
    assert "DELETE FROM processor_sink_fences WHERE writer = 'j@cluster-A'" in message
    # Another job name on cluster B is its own.
    elsewhere = _sinks(pg_database, job="k")
    elsewhere.read_fences("cluster-B")
    elsewhere.recover(0)
    assert [w for w, _ in _rows(pg_database)] == [
        "j.in-0.t",
        "j.in-1.t",
        "j@cluster-A",
        "k.in-0.t",
        "k@cluster-B",
    ]
    for sinks in (first, again, other, elsewhere):
        sinks.close()


def test_two_clusters_starting_at_once_both_refuse(pg_database: str) -> None:
    """Neither may go on while the other holds a claim: each sees both."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {FENCES} (writer text PRIMARY KEY, fence bigint NOT NULL,"
            " checkpoint bigint NOT NULL DEFAULT 0)"
        )
        conn.execute(f"INSERT INTO {FENCES} VALUES ('j@cluster-A', 0), ('j@cluster-B', 0)")
    for cluster in ("cluster-A", "cluster-B"):
        sinks = _sinks(pg_database)
        with pytest.raises(ClaimedElsewhere):
            sinks.read_fences(cluster)
        sinks.close()


def test_a_task_claims_with_its_brokers_cluster_id(kafka_bootstrap: str, pg_database: str) -> None:
    """The id a task passes (`clients.cluster_id`) is the broker's, and stable."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    found = clients.cluster_id(admin)
    assert found and found == clients.cluster_id(admin)
    sinks = _sinks(pg_database)
    sinks.read_fences(found)
    sinks.close()
    assert ("j@" + found, 0) in _rows(pg_database)
