"""The exactly-once PostgreSQL sink against a real server (`processor.sinks.postgres.writer`).

- The writer alone: rows the database refuses are dead, the others written; a prepared
  transaction left by a crash is committed or rolled back as Kafka decided; a zombie whose
  successor raised the fence cannot write.
- Word count into PostgreSQL as real processes, a worker SIGKILLed between PREPARE and
  Kafka's commit, the other between Kafka's commit and COMMIT PREPARED, then one more kill
  mid-stream: the table equals the direct count, a first sight per word (order-sensitive)
  equals the reference's, every committed write (a trigger logs them) is exactly the
  sequence of counts the same operator committed to Kafka, and no prepared transaction is
  left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, errors, sql

from processor import Pipeline
from processor.api.postgres import PostgresTarget
from processor.commands import corpus
from processor.engine.chain import StageChain
from processor.plan.stages import plan
from processor.sinks.postgres.writer import Fenced, PostgresSinks, PostgresWriter, ServerNotReady
from processor.testing import MemoryState
from tests import postgres_server
from tests.conftest import TEST_PG_PORT, postgres_base
from tests.integration.harness import wait_until
from tests.integration.pipeline_run import PipelineRun, read_committed, updates_per_key
from tests.integration.postgres_pipeline import TABLES
from tests.integration.postgres_rows_pipeline import TABLES as ROWS_TABLES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PIPELINE = Path(__file__).resolve().parent / "postgres_pipeline.py"
ROWS_PIPELINE = Path(__file__).resolve().parent / "postgres_rows_pipeline.py"


def _target(dsn: str) -> PostgresTarget:
    return PostgresTarget.of(dsn, "t", ["k"], lambda k, v: {"k": k, "v": v})


def _rows(*pairs: tuple[str, Any]) -> dict[tuple[Any, ...], tuple[dict[str, Any], Any]]:
    return {(k,): ({"k": k, "v": v}, v) for k, v in pairs}


def _table(dsn: str, query: str = "SELECT k, v FROM t ORDER BY k") -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def _prepared(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return [r[0] for r in rows]


def _writer(dsn: str, committed: int = 0) -> PostgresWriter:
    writer = PostgresWriter("j.t-0.s", _target(dsn))
    writer.read_fence()
    writer.recover(committed)
    return writer


def test_refused_rows_are_dead_and_the_others_written(pg_database: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer CHECK (v >= 0))")
    writer = _writer(pg_database)
    dead: list[tuple[Exception, Any]] = []
    rows = _rows(("a", 1), ("nul\x00", 2), ("b", -1), ("c", "x"), ("d", 2**40), ("e", 3))
    assert writer.prepare(1, rows, lambda exc, value: dead.append((exc, value))) == 2
    assert sorted((value for _, value in dead), key=str) == sorted([2, -1, "x", 2**40], key=str)
    assert _table(pg_database) == []  # prepared, not committed
    writer.commit(1)
    assert _table(pg_database) == [("a", 1), ("e", 3)]
    assert _prepared(pg_database) == []
    writer.close()


def test_a_missing_table_fails_the_task_not_the_rows(pg_database: str) -> None:
    writer = _writer(pg_database)
    with pytest.raises(psycopg.errors.UndefinedTable):
        writer.prepare(1, _rows(("a", 1)), lambda exc, value: pytest.fail(f"dead {value}"))
    assert _prepared(pg_database) == []
    writer.close()


@pytest.mark.parametrize(("committed", "kept"), [(7, [("a", 1)]), (6, [])])
def test_a_restart_does_what_kafka_decided(
    pg_database: str, committed: int, kept: list[tuple[str, int]]
) -> None:
    """Prepared as checkpoint 7, then the process dies: its successor commits it if Kafka's
    committed offsets name checkpoint 7, and rolls it back if they name 6."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
    first = _writer(pg_database)
    first.prepare(7, _rows(("a", 1)), lambda exc, value: pytest.fail(str(exc)))
    first.close()  # a crash: the prepared transaction survives its session
    assert len(_prepared(pg_database)) == 1
    second = _writer(pg_database, committed)
    assert _table(pg_database) == kept
    assert _prepared(pg_database) == []
    second.close()


def test_a_zombie_cannot_write_once_its_successor_raised_the_fence(pg_database: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
    zombie = _writer(pg_database)
    successor = _writer(pg_database)
    with pytest.raises(Fenced):
        zombie.prepare(3, _rows(("z", 1)), lambda exc, value: None)
    successor.prepare(3, _rows(("s", 1)), lambda exc, value: None)
    successor.commit(3)
    assert _table(pg_database) == [("s", 1)]
    # A stale restorer (its fence read before the successor's) fails rather than raise.
    stale = PostgresWriter("j.t-0.s", _target(pg_database))
    stale.read_fence()
    newer = _writer(pg_database)
    with pytest.raises(Fenced):
        stale.recover(0)
    for writer in (zombie, successor, stale, newer):
        writer.close()


# The least-privileged role of docs/postgres.md: DML on the table and the fences, no CREATE.
LEAST_PRIVILEGE = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE TABLE t (k text PRIMARY KEY, v integer);
CREATE TABLE processor_sink_fences (
  writer text PRIMARY KEY, fence bigint NOT NULL, checkpoint bigint NOT NULL DEFAULT 0);
GRANT SELECT, INSERT, UPDATE ON t, processor_sink_fences TO {role};
"""


@pytest.fixture
def least_privileged(postgres_dsn: str, pg_database: str) -> Iterator[str]:
    """The DSN of a role with only DML on ``t`` and processor_sink_fences in pg_database."""
    name = f"writer_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(sql.SQL(LEAST_PRIVILEGE).format(role=role))
    try:
        yield conninfo.make_conninfo(pg_database, user=name)
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(role))


def test_a_role_with_dml_on_the_two_tables_only_writes(least_privileged: str) -> None:
    """Hole 3 of issue #40: CREATE TABLE IF NOT EXISTS needs CREATE on the schema even when
    the table exists; the writer looks for processor_sink_fences first."""
    with psycopg.connect(least_privileged) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE elsewhere (k text)")  # the role really lacks CREATE
    writer = _writer(least_privileged)
    writer.prepare(1, _rows(("a", 1)), lambda exc, value: pytest.fail(str(exc)))
    writer.commit(1)
    assert _table(least_privileged) == [("a", 1)]
    writer.prepare(2, _rows(("a", 2)), lambda exc, value: pytest.fail(str(exc)))
    writer.close()  # a crash: its successor, as the same role, resolves what it prepared
    _writer(least_privileged, committed=2).close()
    assert _table(least_privileged) == [("a", 2)]
    assert _prepared(least_privileged) == []


@pytest.mark.parametrize(("committed", "kept"), [(7, [("a", 1)]), (6, [])])
def test_the_orphan_of_a_renamed_writer_is_resolved_at_the_next_start(
    pg_database: str, committed: int, kept: list[tuple[str, int]]
) -> None:
    """Hole 2 of issue #40: sink ``old`` of task s-0 prepared checkpoint 7 and crashed; the
    task restarts with the sink renamed ``new`` (an operator inserted before it). Its
    restore resolves the orphan as Kafka decided, so the new writer is not held back by its
    row locks; another task's transaction is left alone."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer)")
    for name, key in (("j.s-0.old", "a"), ("j.s-1.old", "b")):
        crashed = PostgresWriter(name, _target(pg_database))
        crashed.read_fence()
        crashed.recover(0)
        crashed.prepare(7, _rows((key, 1)), lambda exc, value: pytest.fail(str(exc)))
        crashed.close()
    new = PostgresWriter("j.s-0.new", _target(pg_database))
    sinks = PostgresSinks({"new": new}, ("j", "s-0", ("s",)))
    sinks.read_fences()
    sinks.recover(committed)
    assert _table(pg_database) == kept
    (orphan,) = _prepared(pg_database)  # j.s-1.old.<fence>.7
    assert orphan.startswith("j.s-1.old.") and orphan.endswith(".7")
    new.prepare(8, _rows(("a", 2)), lambda exc, value: pytest.fail(str(exc)))
    sinks.commit(8, "s-0")
    assert _table(pg_database) == [("a", 2)]
    sinks.close()


def test_max_prepared_transactions_0_is_one_line_at_the_start(
    postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A server of PostgreSQL's default (no prepared transactions) is found when the task
    starts, not at its first epoch with rows, in one line naming the setting. (A server of
    its own, on the session's port + 1: the setting takes a restart.)"""
    with postgres_base(tmp_path_factory) as base:
        data_dir = base / "data"
        settings = {"max_prepared_transactions": "0"}
        dsn = postgres_server.start(data_dir, TEST_PG_PORT + 1, settings=settings)
        try:
            writer = PostgresWriter("j.t-0.s", _target(dsn))
            with pytest.raises(ServerNotReady) as raised:
                writer.read_fence()
            writer.close()
        finally:
            postgres_server.stop(data_dir)
    message = str(raised.value)
    assert "max_prepared_transactions is 0" in message and "\n" not in message
    assert f":{TEST_PG_PORT + 1}/postgres" in message


def _row_sink(dsn: str) -> tuple[StageChain, PostgresSinks]:
    """A stateless stage whose records (dicts) are rows of table ``t``, its chain and its
    sinks, the writer restored (no checkpoint committed)."""
    p = Pipeline()
    p.source("in", value="json").sink_postgres(dsn, "t", ["k"], lambda _k, r: r, name="t")
    compiled = plan(p)
    stage = compiled.stages[0]
    writer = PostgresWriter("j.in-0.t", PostgresTarget.of(dsn, "t", ["k"], lambda _k, r: r))
    writer.read_fence()
    writer.recover(0)
    return StageChain(compiled, stage, 0, MemoryState(), {}), PostgresSinks({"t": writer})


def test_a_refused_row_is_dead_once_when_its_checkpoint_is_declined(pg_database: str) -> None:
    """Hole 4 of issue #40: the refused row must not go again into the next epoch."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v integer CHECK (v >= 0))")
    chain, sinks = _row_sink(pg_database)
    chain.values([{"k": "a", "v": 1}, {"k": "b", "v": -1}])
    assert sinks.prepare(1, chain, "in-0") == 1
    (dead,) = chain.take_dead()
    assert json.loads(dead.value) == {"k": "b", "v": -1}
    sinks.decline(1, chain)  # the rows go again, in checkpoint 2's transaction
    assert sinks.prepare(2, chain, "in-0") == 1
    assert chain.take_dead() == []
    sinks.commit(2, "in-0")
    assert _table(pg_database) == [("a", 1)]
    assert _prepared(pg_database) == []
    sinks.close()


def test_a_deferred_constraint_failing_at_prepare_makes_the_epoch_dead(pg_database: str) -> None:
    """A deferred constraint is checked at PREPARE, after every row passed alone: the epoch's
    rows are dead records (with the error) and its transaction prepares empty, rather than
    fail the task at every restart; the next epoch writes."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE parents (id text PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE t (k text PRIMARY KEY, v integer, parent text REFERENCES parents (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        conn.execute("INSERT INTO parents VALUES ('p')")
    chain, sinks = _row_sink(pg_database)
    chain.values([{"k": "a", "v": 1, "parent": "p"}, {"k": "b", "v": 2, "parent": "none"}])
    assert sinks.prepare(1, chain, "in-0") == 0
    dead = chain.take_dead()
    assert sorted(json.loads(d.value)["k"] for d in dead) == ["a", "b"]
    assert all("parent" in d.error or "foreign key" in d.error for d in dead)
    sinks.commit(1, "in-0")
    chain.values([{"k": "c", "v": 3, "parent": "p"}])
    assert sinks.prepare(2, chain, "in-0") == 1
    sinks.commit(2, "in-0")
    assert _table(pg_database) == [("c", 3)]
    assert _prepared(pg_database) == []
    sinks.close()


def test_rows_of_one_key_merge_column_by_column_through_a_declined_checkpoint(
    pg_database: str,
) -> None:
    """Hole 5 of issue #40: ``{k, a: 1}`` then ``{k, b: 2}`` leave a = 1, b = 2 in the
    table, within an epoch and across a declined checkpoint, as upserts in turn would."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, a integer, b integer, c integer)")
        conn.execute("INSERT INTO t VALUES ('k', 0, 0, 7), ('j', 0, 0, 0)")
    chain, sinks = _row_sink(pg_database)
    chain.values([{"k": "k", "a": 1}, {"k": "k", "b": 2}, {"k": "j", "a": 5}])
    sinks.prepare(1, chain, "in-0")
    sinks.decline(1, chain)
    chain.values([{"k": "j", "b": 6}, {"k": "k", "a": 3}])  # merged after the declined rows
    sinks.prepare(2, chain, "in-0")
    sinks.commit(2, "in-0")
    assert _table(pg_database, "SELECT k, a, b, c FROM t ORDER BY k") == [
        ("j", 5, 6, 0),
        ("k", 3, 2, 7),
    ]
    sinks.close()


def _feed(run_: PipelineRun, param: str, values: list[bytes], seconds: float) -> None:
    """``values`` into build()'s topic ``param``, spread over ``seconds``, in the background."""
    topic = run_.topics[param]
    run_.feed_values(values, seconds, lambda chunk: run_.send(topic, chunk))


def _kill_mid_stream(run_: PipelineRun, index: int) -> None:
    """SIGKILL worker ``index`` while the feed still runs, once the job committed more."""
    run_.wait_for_checkpoints(2)
    assert run_.feeding, "the feed ended before the kill: make it longer"
    run_.kill_worker(index)
    run_.start_worker(index)


def _job(
    where: tuple[str, str, Path, pytest.FixtureRequest],
    tables: str,
    module: Path,
    topics: dict[str, str],
    source_partitions: int,
    shuffle_partitions: str = "2",
) -> PipelineRun:
    """The tables created, and a run of ``module``'s pipeline writing into them (stopped at
    the test's end, passed or not); ``where``: the broker, the database, the test's
    directory and request."""
    bootstrap, database, workdir, request = where
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(tables)
    run_ = PipelineRun(
        bootstrap,
        workdir,
        module,
        topics,
        source_partitions=source_partitions,
        expected_workers="2",
        shuffle_partitions=shuffle_partitions,
    )
    run_.env["PROCESSOR_TEST_PG_SINK_DSN"] = database
    request.addfinalizer(run_.stop)
    return run_


def _lines(count: int) -> list[dict[str, Any]]:
    text = list(corpus.lines(count * 12, seed=5, vocab=5_000))[:count]
    return [{"i": i, "text": line} for i, line in enumerate(text)]


def test_word_count_into_postgres_with_kills_between_prepare_and_commit(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run_ = _job(
        (kafka_bootstrap, pg_database, tmp_path, request),
        TABLES,
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=1,  # one order of the lines: the first sight of a word is defined
        shuffle_partitions="2",
    )
    (keyed,) = [s for s in plan(run_.pipeline).stages if s.postgres_sinks]
    lines = _lines(6_000)
    words = Counter(w for line in lines for w in line["text"].split())
    first: dict[str, int] = {}
    for line in lines:
        for w in line["text"].split():
            first.setdefault(w, line["i"])

    _feed(run_, "lines", [json.dumps(line).encode() for line in lines], 20)
    run_.start_coordinator(exit_when_idle=False)
    # SIGKILLed at its task's 2nd commit of rows: Kafka's transaction committed, the prepared
    # PostgreSQL one not; the other worker after its 3rd prepared transaction, before Kafka's.
    run_.start_worker(0, fault=f"postgres_committing@{keyed.name}-0#2")
    run_.start_worker(1, fault="postgres_prepared#3")
    wait_until(lambda: len(run_.dead_workers()) == 2, 120, "both fault points reached")
    for index in (0, 1):
        assert "fault point" in run_.log(f"worker-{index}"), run_.log(f"worker-{index}")[-2000:]
        run_.start_worker(index)
    _kill_mid_stream(run_, 1)
    count = "SELECT word, n FROM word_counts"
    wait_until(lambda: dict(_table(pg_database, count)) == words, 180, "every count in the table")
    run_.wait_for_checkpoints(3)  # a write too many would be committed by now

    got = dict(_table(pg_database, "SELECT word, n FROM word_counts"))
    assert got == dict(words), f"{len(set(got.items()) ^ set(words.items()))} rows differ"
    seen = _table(pg_database, "SELECT word, line, detail FROM first_seen")
    assert {w: line for w, line, _ in seen} == first
    assert all(detail == {"line": line} for _, line, detail in seen)
    # Every committed write, in order, against the same operator's output committed to Kafka.
    log: dict[bytes | None, list[bytes]] = {}
    for word, n in _table(pg_database, "SELECT word, n FROM count_log ORDER BY id"):
        log.setdefault(word.encode(), []).append(str(n).encode())
    kafka = updates_per_key(read_committed(kafka_bootstrap, run_.topics["counts"]))
    assert log == kafka, f"{sum(log.get(k) != v for k, v in kafka.items())} words differ"
    assert _prepared(pg_database) == []


def test_a_stateless_stage_writes_each_row_once_through_kills(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The source tasks write the rows themselves: one killed between Kafka's commit and
    COMMIT PREPARED, then a worker mid-stream. Every row is written once (a trigger logs each
    write that commits), none is missing, nothing is left prepared."""
    run_ = _job(
        (kafka_bootstrap, pg_database, tmp_path, request),
        ROWS_TABLES,
        ROWS_PIPELINE,
        {"events": "events"},
        source_partitions=2,
    )
    events = [{"id": i, "n": i * 3} for i in range(20_000)]
    _feed(run_, "events", [json.dumps(e).encode() for e in events], 16)
    run_.start_coordinator(exit_when_idle=False)
    run_.start_worker(0, fault="postgres_committing#2")
    run_.start_worker(1)
    wait_until(lambda: run_.dead_workers() == [0], 120, "the fault point reached")
    run_.start_worker(0)
    _kill_mid_stream(run_, 1)
    want = [e["id"] for e in events if e["id"] % 7 != 3]
    counted = "SELECT count(*) FROM events"
    wait_until(lambda: _table(pg_database, counted) == [(len(want),)], 180, "every row")
    run_.wait_for_checkpoints(3)  # a write too many would be committed by now
    log = [r[0] for r in _table(pg_database, "SELECT id FROM event_log ORDER BY seq")]
    assert sorted(log) == want, f"{len(log) - len(set(log))} written twice"
    rows = _table(pg_database, "SELECT id, body FROM events ORDER BY id")
    assert rows == [(e["id"], e) for e in events if e["id"] % 7 != 3]
    assert _prepared(pg_database) == []


def test_workers_stopped_by_sigterm_leave_nothing_prepared(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Hole 2 of issue #40: a clean stop resolves the task's own prepared transaction. One
    worker is asked to stop (SIGTERM) at the very step between PREPARE and Kafka's commit,
    the other mid-stream: once both are gone nothing is prepared; restarted, the job ends
    with the table equal to the direct count."""
    run_ = _job(
        (kafka_bootstrap, pg_database, tmp_path, request),
        TABLES,
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=2,
    )
    lines = _lines(4_000)
    words = Counter(w for line in lines for w in line["text"].split())
    _feed(run_, "lines", [json.dumps(line).encode() for line in lines], 16)
    run_.start_coordinator(exit_when_idle=False)
    run_.start_worker(0, fault="postgres_prepared#2:term")
    run_.start_worker(1)
    wait_until(lambda: run_.dead_workers() == [0], 120, "worker 0 stopped at its fault point")
    assert "fault point postgres_prepared" in run_.log("worker-0")
    assert run_.feeding, "the feed ended before the stop: make it longer"
    run_.kill_worker(1, signal.SIGTERM)
    wait_until(lambda: run_.dead_workers() == [0, 1], 60, "worker 1 stopped")
    assert [run_.workers[i].returncode for i in (0, 1)] == [0, 0]
    assert _prepared(pg_database) == []
    run_.start_worker(0)
    run_.start_worker(1)
    _finishes_like_the_reference(run_, pg_database, words)


def test_a_map_inserted_before_the_sink_resolves_the_old_writers_orphans(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Hole 2 of issue #40: a worker SIGKILLed between Kafka's commit and COMMIT PREPARED
    leaves a prepared transaction of sink ``...count.sink_postgres``; the job restarts with a
    map inserted before that sink, which renames it. Its tasks resolve the old writer's
    orphan (committed: Kafka did), so the table equals the direct count, no upsert waits for
    its row locks, and every committed write matches the counts committed to Kafka."""
    run_ = _job(
        (kafka_bootstrap, pg_database, tmp_path, request),
        TABLES,
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=1,
    )
    lines = _lines(4_000)
    words = Counter(w for line in lines for w in line["text"].split())
    _feed(run_, "lines", [json.dumps(line).encode() for line in lines], 16)
    run_.start_coordinator(exit_when_idle=False)
    for index in (0, 1):
        run_.start_worker(index, fault="postgres_committing#2")
    wait_until(lambda: run_.dead_workers() != [], 120, "a fault point reached")
    for index in (0, 1):
        run_.kill_worker(index)  # SIGKILL: what it had prepared stays prepared
    orphans = _prepared(pg_database)
    assert any(".count.sink_postgres." in gid for gid in orphans), orphans
    run_.kill_coordinator()
    run_.env["PROCESSOR_TEST_PG_INSERT_MAP"] = "1"
    run_.start_coordinator(exit_when_idle=False)
    for index in (0, 1):
        run_.start_worker(index)
    _finishes_like_the_reference(run_, pg_database, words)
    assert not any(gid in _prepared(pg_database) for gid in orphans)
    for index in (0, 1):
        assert "lock timeout" not in run_.log(f"worker-{index}")
        assert "replaces writer" in run_.log(f"worker-{index}")


def _processor(run_: PipelineRun, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", *args],
        env=run_.env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _orphans_of_a_crash(run_: PipelineRun, dsn: str, lines: list[dict[str, Any]]) -> list[str]:
    """The job fed ``lines``, then its workers SIGKILLed once one had Kafka's transaction
    of its 2nd epoch with rows committed and the database's still prepared, and everything
    stopped: what is left prepared (at least that one)."""
    _feed(run_, "lines", [json.dumps(line).encode() for line in lines], 16)
    run_.start_coordinator(exit_when_idle=False)
    for index in (0, 1):
        run_.start_worker(index, fault="postgres_committing#2")
    wait_until(lambda: run_.dead_workers() != [], 120, "a fault point reached")
    for index in (0, 1):
        run_.kill_worker(index)
    run_.kill_coordinator()
    orphans = _prepared(dsn)
    assert orphans, "nothing left prepared"
    return orphans


def _finishes_like_the_reference(run_: PipelineRun, dsn: str, words: Counter[str]) -> None:
    """Run on, until the table holds every count: it equals the direct count, and every
    committed write is the sequence of counts committed to Kafka."""
    count = "SELECT word, n FROM word_counts"
    wait_until(lambda: dict(_table(dsn, count)) == words, 180, "every count in the table")
    run_.wait_for_checkpoints(3)  # a write too many would be committed by now
    assert dict(_table(dsn, count)) == dict(words)
    log: dict[bytes | None, list[bytes]] = {}
    for word, n in _table(dsn, "SELECT word, n FROM count_log ORDER BY id"):
        log.setdefault(word.encode(), []).append(str(n).encode())
    assert log == updates_per_key(read_committed(run_.bootstrap, run_.topics["counts"]))


def test_the_prepared_command_lists_and_resolves_a_stopped_jobs_transactions(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Hole 2 of issue #40: ``processor postgres prepared --dsn`` lists what the crashed
    job left prepared, and ``--resolve`` commits those whose Kafka transaction committed and
    rolls back the others; the job then goes on to the reference result."""
    run_ = _job(
        (kafka_bootstrap, pg_database, tmp_path, request),
        TABLES,
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=1,
    )
    lines = _lines(4_000)
    orphans = _orphans_of_a_crash(run_, pg_database, lines)
    listed = _processor(run_, "postgres", "prepared", "--dsn", pg_database)
    assert listed.returncode == 0, listed.stderr
    for gid in orphans:
        assert f"{gid}  prepared " in listed.stdout
    assert f"(job {run_.job}, task " in listed.stdout
    resolved = _processor(run_, "postgres", "prepared", "--dsn", pg_database, "--resolve")
    assert resolved.returncode == 0, resolved.stderr
    assert "COMMIT PREPARED" in resolved.stdout, resolved.stdout  # the fault point's
    assert _prepared(pg_database) == []
    run_.start_coordinator(exit_when_idle=False)
    for index in (0, 1):
        run_.start_worker(index)
    _finishes_like_the_reference(run_, pg_database, Counter(_words_of(lines)))


def _words_of(lines: list[dict[str, Any]]) -> list[str]:
    return [w for line in lines for w in line["text"].split()]


def test_a_job_started_from_a_savepoint_resolves_what_the_old_job_left_prepared(
    kafka_bootstrap: str, pg_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Hole 2 of issue #40: the job crashed with transactions prepared; a job of another
    name starts from its savepoint, whose writers' names differ. Its tasks resolve the old
    job's as that job's Kafka transactions decided: no upsert waits for their row locks,
    and the table ends equal to the direct count."""
    first = _job(
        (kafka_bootstrap, pg_database, tmp_path / "first", request),
        TABLES,
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=1,
    )
    lines = _lines(4_000)
    orphans = _orphans_of_a_crash(first, pg_database, lines)
    taken = _processor(first, "savepoint", "--last-completed", "--name", f"sp-{first.job}")
    assert taken.returncode == 0, taken.stderr
    second = PipelineRun(
        kafka_bootstrap,
        tmp_path / "second",
        PIPELINE,
        {"lines": "lines", "counts": "counts"},
        source_partitions=1,
        topic_prefix=first.job,
        expected_workers="2",
        shuffle_partitions="2",
        checkpoint_dir=str(tmp_path / "first" / "checkpoints"),
        from_savepoint=f"sp-{first.job}",
    )
    second.env["PROCESSOR_TEST_PG_SINK_DSN"] = pg_database
    request.addfinalizer(second.stop)
    second.start_coordinator(exit_when_idle=False)
    for index in (0, 1):
        second.start_worker(index)
    count = "SELECT word, n FROM word_counts"
    words = Counter(_words_of(lines))
    wait_until(lambda: dict(_table(pg_database, count)) == words, 180, "every count in the table")
    assert not any(gid in _prepared(pg_database) for gid in orphans)
    logs = second.log("worker-0") + second.log("worker-1")
    assert f"(job {first.job}, checkpoint " in logs
    assert "lock timeout" not in logs
