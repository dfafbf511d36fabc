"""An epoch's rows in one statement (`processor.sinks.postgres.statements.bulk_upsert`) against
a real PostgreSQL: the table and the dead rows come out exactly as a statement per row makes
them, over every kind of value a row may hold, the hostile ones included."""

from __future__ import annotations

import datetime
import math
from typing import Any

import psycopg
import pytest

from processor.api.postgres import PostgresTarget
from processor.sinks.postgres.writer import PostgresWriter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

COLUMNS = (
    "k text PRIMARY KEY, i integer, b bigint, f double precision, n numeric, ok boolean,"
    " at timestamptz, d date, s text, doc jsonb, tags integer[]"
)

GOOD: list[dict[str, Any]] = [
    {"i": 1, "b": 2**40, "f": 1.5, "n": 10, "ok": True, "s": "plain", "doc": {"a": [1, 2]}},
    {"i": -7, "f": -0.25, "n": 1.25, "ok": False, "s": "ünï 😀", "doc": {"x": {"y": None}}},
    {"i": None, "b": None, "f": None, "s": None, "doc": None, "tags": None},
    {"i": "12", "s": 5, "at": "2026-12-05T10:00:00+00:00", "d": "2026-12-05", "ok": "true"},
    {"f": 3, "n": "1e3", "s": True, "doc": {"quote": "\"'\\", "nested": [{"deep": 1}]}},
    {"s": "'); DROP TABLE t; --", "doc": {"'); DROP TABLE t; --": 1}},
]

# Rows that go one statement each (a date, an array column): the same table all the same.
OTHER: list[dict[str, Any]] = [
    {"f": -0.0},  # JSON's number would lose the sign of zero
    {"tags": [1, 2, 3], "i": 3},
    {"at": datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC), "d": datetime.date(2026, 1, 1)},
]

# Refused by the server: the one statement fails, and the rows go again one by one.
BAD: list[dict[str, Any]] = [
    {"s": "nul\x00"},
    {"i": 2**40},
    {"i": "x"},
    {"i": 1.5},  # rounded by the row's assignment cast: bulk fails, the row passes
    {"i": True},
    {"d": "yesterday-ish"},
    {"doc": {"nul": "\x00"}},
]

# Values JSON would not carry as their parameter does: one statement per row from the start.
HOSTILE: list[dict[str, Any]] = [
    {"f": math.nan},
    {"f": math.inf},
    {"s": {"a": 1}},
    {"doc": "not json"},
    {"doc": [1, 2]},
]


NAMES = ("i", "b", "f", "n", "ok", "at", "d", "s", "doc")


def _rows(values: list[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[dict[str, Any], Any]]:
    """One row per value, keyed k<index>, with every column but the array (None where the
    value names none: one column set, as a sink's rows have), or as given if it has one."""
    return {
        (f"k{i:02}",): (
            {"k": f"k{i:02}", **(v if "tags" in v else {c: v.get(c) for c in NAMES})},
            v,
        )
        for i, v in enumerate(values)
    }


def _write(dsn: str, table: str, rows: dict[Any, Any], one_by_one: bool) -> list[str]:
    """``rows`` into ``table`` through a writer, in one epoch or in one epoch per row; the
    keys of the rows that came out dead."""
    target = PostgresTarget.of(dsn, table, ["k"], lambda k, v: v)
    writer = PostgresWriter(f"j.t-0.{table}", target)
    writer.read_fence()
    writer.recover(0)
    dead: list[str] = []
    epochs = [{ident: row} for ident, row in rows.items()] if one_by_one else [rows]
    for checkpoint, epoch in enumerate(epochs, start=1):
        keys = {id(value): ident[0] for ident, (_, value) in epoch.items()}

        def refused(_: Exception, value: Any, keys: dict[int, str] = keys) -> None:
            dead.append(keys[id(value)])

        writer.prepare(checkpoint, epoch, refused)
        writer.commit(checkpoint)
    writer.close()
    return sorted(dead)


def _table(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY k").fetchall()


# Each value JSON would not carry alone among good rows too: together, one of them would hide
# a wrong decision on another (any one keeps the whole epoch off the one statement).
# (An array column's row is a column set of its own: the good rows still go as one statement.)
_ALONE = [([*GOOD, v], "tags" in v, None) for v in HOSTILE + OTHER]


@pytest.mark.parametrize(
    ("values", "bulk", "dead"),
    [
        (GOOD, True, 0),
        (GOOD + BAD, True, 6),
        (GOOD + HOSTILE, False, 2),
        (GOOD + OTHER, False, 0),
        *_ALONE,
    ],
    ids=["good", "bad-rows", "hostile-rows", "dates-arrays"]
    + [f"alone-{i}" for i in range(len(_ALONE))],
)
def test_one_statement_writes_what_a_statement_per_row_does(
    pg_database: str,
    values: list[dict[str, Any]],
    bulk: bool,
    dead: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE bulk ({COLUMNS})")
        conn.execute(f"CREATE TABLE single ({COLUMNS})")
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def spy(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query.as_string(self) if hasattr(query, "as_string") else str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy)  # a spy: the server is real
    bulk_dead = _write(pg_database, "bulk", _rows(values), one_by_one=False)
    assert any("jsonb_to_recordset" in s for s in sent) == bulk
    single_dead = _write(pg_database, "single", _rows(values), one_by_one=True)  # a row each
    assert bulk_dead == single_dead
    if dead is not None:
        assert len(bulk_dead) == dead  # NaN and infinity are floats; a dict goes into text
    for got, want in zip(_table(pg_database, "bulk"), _table(pg_database, "single"), strict=True):
        assert repr(got) == repr(want)  # repr: NaN is not equal to itself
    assert len(_table(pg_database, "bulk")) == len(values) - len(bulk_dead)
