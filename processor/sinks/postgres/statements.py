"""The upserts a writer runs: a row per statement (`upsert`), or an epoch's rows of one column
set in one statement (`bulk_upsert`): ``INSERT ... SELECT`` from ``jsonb_to_recordset`` of
one JSON document, typed by the table's own catalog.

One ``INSERT`` per row (psycopg's ``executemany``, pipelined) costs the server a statement
per row and the client an adaptation per value; one statement over a JSON array costs one
parse of a document that ``json.dumps`` writes in C. A temporary table and ``COPY`` would be
the other bulk path, but a transaction that touched a temporary table cannot be prepared.

The bulk statement is only an attempt: rows that JSON cannot carry as they are (a value that
is not JSON, a float that is not finite, a column that is an array, a column the catalog does
not know) take the row statements instead (`rows_json` returns None), and any error of the
bulk statement sends the epoch to the writer's row-by-row path, which finds the row at fault
(a JSON value converts as the server's ``json_populate_record`` does, a parameter as an
assignment cast: the row path decides what is dead).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg import sql

_COLUMNS = (
    "SELECT attname, format_type(atttypid, atttypmod), attndims > 0 OR t.typcategory = 'A'"
    " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
    " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped"
)

# What JSON carries exactly: a row holding anything else goes as parameters.
_PLAIN = (str, int, bool, type(None))
_JSON = ("json", "jsonb")


def column_types(conn: psycopg.Connection[Any], table: tuple[str, ...]) -> dict[str, str]:
    """The table's columns and their types as SQL (``format_type``), without array columns
    (a JSON array does not become a PostgreSQL array)."""
    name = sql.Identifier(*table).as_string(conn)
    rows = conn.execute(_COLUMNS, (name,)).fetchall()
    return {column: kind for column, kind, is_array in rows if not is_array}


def upsert(table: tuple[str, ...], columns: tuple[str, ...], keys: tuple[str, ...]) -> sql.Composed:
    """The upsert of a row with ``columns`` (a row that exists gets the other columns)."""
    return sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) {a}").format(
        t=sql.Identifier(*table),
        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
        vals=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        a=on_conflict(columns, keys),
    )


def on_conflict(columns: tuple[str, ...], keys: tuple[str, ...]) -> sql.Composed:
    others = [c for c in columns if c not in keys]
    sets = sql.SQL(", ").join(
        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in others
    )
    action = sql.SQL("DO UPDATE SET {}").format(sets) if others else sql.SQL("DO NOTHING")
    on = sql.SQL(", ").join(map(sql.Identifier, keys))
    return sql.SQL("ON CONFLICT ({}) {}").format(on, action)


def bulk_upsert(
    table: tuple[str, ...],
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    types: Mapping[str, str],
) -> sql.Composed | None:
    """The upsert of rows with ``columns`` from one JSON array parameter, or None when the
    catalog does not type every column."""
    if any(column not in types for column in columns):
        return None
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    record = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(column), sql.SQL(types[column]))
        for column in columns
    )
    return sql.SQL(
        "INSERT INTO {t} ({cols}) SELECT {cols} FROM jsonb_to_recordset(%s::jsonb) AS r({rec}) {a}"
    ).format(t=sql.Identifier(*table), cols=names, rec=record, a=on_conflict(columns, keys))


def rows_json(rows: Iterable[Mapping[str, Any]], types: Mapping[str, str]) -> str | None:
    """The rows as one JSON array, or None if a value would not reach its column as its
    parameter would: a dict goes only into a json or jsonb column (as the row path's
    ``Jsonb``), which takes nothing else (a string there is JSON text to the row path), and a
    list, bytes or a date go as parameters."""
    rows = list(rows)
    for row in rows:
        for column, value in row.items():
            if value is None:
                continue
            if types.get(column) in _JSON:
                if type(value) is not dict or not _is_json(value):
                    return None
            elif type(value) not in _PLAIN and not _exact_float(value):
                return None
    try:
        return json.dumps(rows, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _exact_float(value: Any) -> bool:
    """A float that JSON's number brings back as it is: finite, and not -0.0 (the number
    becomes a numeric first, which has no negative zero)."""
    if type(value) is not float or not math.isfinite(value):
        return False
    return value != 0 or math.copysign(1.0, value) > 0


def _is_json(value: Any, depth: int = 0) -> bool:
    """Whether a dict or list holds only what JSON keeps (string keys, finite floats)."""
    if depth > 64:
        return False
    if type(value) is dict:
        return all(type(k) is str and _is_json(v, depth + 1) for k, v in value.items())
    if type(value) is list:
        return all(_is_json(v, depth + 1) for v in value)
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in _PLAIN
