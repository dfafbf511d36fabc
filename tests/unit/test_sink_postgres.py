"""``sink_postgres`` as the pipeline sees it: arguments checked when the pipeline is built,
rows kept per key within an epoch, a row function's failures as dead records, and
`processor.testing` showing the table the upserts leave. (The writes themselves, against a
real server: tests/integration/test_postgres_sink.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from processor import Pipeline
from processor.api.postgres import PostgresTarget, Rows, add_rows
from processor.api.streams import PipelineError
from processor.plan.stages import plan
from processor.sinks.postgres import prepared
from processor.testing import Driver

DSN = "postgresql://app@127.0.0.1/app"


def _row(k: Any, v: Any) -> dict[str, Any]:
    return {"word": k, "n": v}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "t", ["k"], _row), "dsn must be"),
        ((DSN, "a.b.c", ["k"], _row), "table must be"),
        ((DSN, "bad name", ["k"], _row), "table must be"),
        ((DSN, "t", "k", _row), "key_columns must be a list"),
        ((DSN, "t", [], _row), "distinct, non-empty"),
        ((DSN, "t", ["k", "k"], _row), "distinct, non-empty"),
        ((DSN, "t", ["k"], "not a function"), "columns must be a function"),
    ],
)
def test_bad_arguments_are_one_line_at_build_time(args: tuple[Any, ...], message: str) -> None:
    p = Pipeline()
    with pytest.raises(PipelineError, match=message):
        p.source("in").key_by(str).count().sink_postgres(*args)


def test_a_pipeline_whose_only_sink_is_a_table_plans() -> None:
    p = Pipeline()
    p.source("in").key_by(str).count().sink_postgres(DSN, "app.counts", ["word"], _row)
    (keyed,) = [s for s in plan(p).stages if s.postgres_sinks]
    target = keyed.postgres_sinks[0].postgres
    assert target is not None and target.table == ("app", "counts")


def test_rows_keep_the_last_per_key_in_write_order_and_bad_ones_are_dead() -> None:
    def columns(k: Any, v: Any) -> Any:
        if v == "raise":
            raise ValueError("no")
        if v == "list":
            return [1]
        if v == "nokey":
            return {"n": 1}
        if v == "unhashable":
            return {"word": {"a": 1}, "n": 1}
        return {"word": k, "n": v}

    target = PostgresTarget.of(DSN, "t", ["word"], columns)
    rows: Rows = {}
    dead: list[tuple[str, Any]] = []
    batch = [("a", 1), ("b", 1), ("a", 2), ("x", "raise"), ("x", "list"), ("x", "nokey")]
    batch.append(("x", "unhashable"))
    add_rows(target, rows, batch, True, lambda exc, v: dead.append((type(exc).__name__, v)))
    assert list(rows) == [("b",), ("a",)]  # a's last row, written after b's
    assert rows[("a",)] == ({"word": "a", "n": 2}, 2)
    assert [v for _, v in dead] == ["raise", "list", "nokey", "unhashable"]


def test_the_testing_driver_shows_the_table() -> None:
    p = Pipeline()
    counts = p.source("words").key_by(str).count()
    counts.sink_postgres(DSN, "counts", ["word"], _row, name="table")
    d = Driver(p)
    for word in ["a", "b", "a"]:
        d.send("words", word)
    d.checkpoint()
    d.send("words", "a")
    d.finish()
    assert d.table("table") == [{"word": "a", "n": 3}, {"word": "b", "n": 1}]
    with pytest.raises(ValueError, match="not a PostgreSQL sink"):
        d.table("nope")


def test_a_long_writer_name_still_fits_a_transaction_id() -> None:
    writer = prepared.owner("job" * 40, "stage-0", "sink" * 30)
    name = prepared.gid(writer, 2**62, 2**62)
    assert len(name.encode()) <= prepared.MAX_GID_BYTES
    assert prepared.parse(writer, name) == (2**62, 2**62)
    assert writer != prepared.owner("job" * 40, "stage-0", "sink" * 31)


def test_rows_of_one_key_merge_column_by_column_in_order() -> None:
    """Hole 5 of issue #40: ``{k, a: 1}`` then ``{k, b: 2}`` in one epoch leave a = 1, b = 2,
    as two upserts in turn would; a later column value replaces an earlier one."""
    target = PostgresTarget.of(DSN, "t", ["k"], lambda k, v: {"k": k, **v})
    rows: Rows = {}
    batch = [("k", {"a": 1}), ("j", {"a": 0}), ("k", {"b": 2}), ("k", {"a": 3, "c": None})]
    add_rows(target, rows, batch, True, lambda exc, v: pytest.fail(f"dead {v}"))
    assert list(rows) == [("j",), ("k",)]  # k's row written after j's
    assert rows[("k",)] == ({"k": "k", "a": 3, "b": 2, "c": None}, {"a": 3, "c": None})


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app:hunter2@db:5432/app",
        "postgres://app:hunter2@db/app?sslmode=require",
        "postgresql://app@db/app?password=hunter2&sslmode=require",
        "host=db user=app password=hunter2 dbname=app",
        "host=db password = 'hunter2 x' dbname=app",
    ],
)
def test_a_targets_repr_never_shows_the_password(dsn: str) -> None:
    target = PostgresTarget.of(dsn, "t", ["k"], _row)
    assert "hunter2" not in repr(target)
    assert "***" in repr(target) and "db" in repr(target)
    p = Pipeline()
    p.source("in").key_by(str).count().sink_postgres(dsn, "t", ["word"], _row)
    (stage,) = [s for s in plan(p).stages if s.postgres_sinks]
    assert "hunter2" not in repr(stage.postgres_sinks[0])


def test_the_prepared_command_says_whose_each_transaction_is() -> None:
    """``processor postgres prepared``: the job's, by task (resolved); another job's and a
    foreign id are listed and left alone."""
    from processor.commands.postgres import Prepared, render, tasks_of
    from processor.jobs.graph import JobGraph

    p = Pipeline()
    p.source("in").key_by(str).count().sink_postgres(DSN, "t", ["word"], _row)
    graph = JobGraph("wc", plan(p))
    keyed = next(s for s in graph.stages if s.postgres_sinks).name
    ours = prepared.owner("wc", f"{keyed}-1", "old.sink_postgres")
    found = [
        Prepared(prepared.gid(ours, 2, 9), "2026-12-05T10:00:00+00:00", "app", ours, 2, 8),
        Prepared("other." + prepared.gid(ours, 1, 1), "t", "app", "other." + ours, 1, 0),
        Prepared("x.1.2\u00b2", "t", "dba", prepared.writer_of("x.1.2\u00b2")),
    ]
    assert tasks_of(graph, found) == {f"{keyed}-1": [ours]}
    lines = render(graph, found)
    assert lines[0].endswith(f"(job wc, task {keyed}-1, last committed in the table: 8)")
    assert lines[1].endswith("(not this job's, last committed in the table: 0)")
    assert lines[2].endswith("(not a processor transaction id)")
