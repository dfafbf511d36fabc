"""``sink_postgres``: what a stream's records become as rows of a PostgreSQL table.

The pipeline side only: the target (`PostgresTarget`, `processor.api.targets`, checked when built)
and the rows of a batch, kept per epoch by the columns of the table's key (`add_rows`).
Writing them, exactly once, is the task's (`processor.sinks.postgres.writer`), at each
checkpoint. Rows wait for the checkpoint because a database transaction of the next epoch
may not touch a row before the prepared transaction of this one is committed: its locks.
The rows of one key merge column by column, in order (`merge_row`): what an upsert of each
in turn would leave, in fewer rows, wherever the checkpoints fall.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from processor.api.ops import key_of
from processor.api.targets import PostgresTarget as PostgresTarget  # re-exported: sinks/postgres
from processor.serde.codec import RecordError, shown

# An epoch's rows of one sink: by the values of the key columns, the row and the value it
# came from (a row the database refuses is dead-lettered with that value).
Rows = dict[tuple[Any, ...], tuple[dict[str, Any], Any]]


def add_rows(
    target: PostgresTarget,
    rows: Rows,
    batch: list[Any],
    keyed: bool,
    dead: Callable[[Exception, Any], None],
) -> None:
    """``batch``'s rows into ``rows`` (merged into the key's row, `merge_row`);
    ``dead(exc, value)`` for a record whose function raised or returned no usable row."""
    fn, keys = target.columns, target.key_columns
    for item in batch:
        if keyed:
            text, value = item
            key = key_of(text)
        else:
            key, value = None, item
        try:
            row = fn(key, value)
            if not isinstance(row, Mapping):
                raise RecordError(f"columns function returned {type(row).__name__}, not a dict")
            row = dict(row)
            if not all(type(c) is str for c in row):
                raise RecordError(f"columns function returned a non-str column in {shown(row)}")
            missing = [k for k in keys if k not in row]
            if missing:
                raise RecordError(f"row {shown(row)} has no key column {', '.join(missing)}")
            ident = tuple(row[k] for k in keys)
        except Exception as exc:  # noqa: BLE001 - the user's function: a dead record
            dead(exc, value)
            continue
        try:
            hash(ident)
        except TypeError as exc:
            dead(RecordError(f"key column values of {shown(row)} are not hashable: {exc}"), value)
            continue
        merge_row(rows, ident, row, value)


def merge_row(rows: Rows, ident: tuple[Any, ...], row: dict[str, Any], value: Any) -> None:
    """``row`` of key ``ident`` after the one ``rows`` holds: its columns replace theirs, the
    others stay (as two upserts in turn would leave them), and the key's row moves to the end
    (the order of the writes). The merged row goes with ``value``, the newest record's.

    >>> rows: Rows = {}
    >>> merge_row(rows, ("k",), {"k": "k", "a": 1}, 1)
    >>> merge_row(rows, ("k",), {"k": "k", "b": 2}, 2)
    >>> rows
    {('k',): ({'k': 'k', 'a': 1, 'b': 2}, 2)}
    """
    before = rows.pop(ident, None)
    rows[ident] = ({**before[0], **row} if before is not None else row, value)
