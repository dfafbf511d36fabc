"""Where a sink's records go, as plain data checked when the pipeline is built: a Kafka
sink's key, value and headers (`SinkSpec`), a PostgreSQL table (`PostgresTarget`).

The graph's nodes hold them (`processor.api.node`); encoding records with them is
`processor.api.sinks`' and `processor.api.postgres`'.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from processor.errors import PipelineError
from processor.redact import redacted
from processor.serde import Serde, is_serde, resolve
from processor.serde.codec import RecordError, serde_dumps

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")


@dataclass(frozen=True)
class SinkSpec:
    """What a sink does instead of the defaults: ``key(k, v)`` (None: ``str(key)``),
    ``value(k, v) -> bytes`` (always set), ``headers(k, v)`` (None: no headers);
    ``serde``: the serde ``value`` encodes with (None for a value function), for whoever
    reads the sink's records back (a test harness)."""

    key: Callable[[Any, Any], Any] | None
    value: Callable[[Any, Any], bytes]
    headers: Callable[[Any, Any], Any] | None
    serde: Serde | None = None

    @staticmethod
    def of(topic: str, key: Any, value: Any, headers: Any) -> SinkSpec:
        """The spec of ``sink(topic, key=, value=, headers=)``; PipelineError if one of them
        is not what it should be."""
        where = f"sink({topic!r})"
        for what, fn in (("key", key), ("headers", headers)):
            if fn is not None and not callable(fn):
                raise PipelineError(f"{where} {what}: expected a function, got {type(fn).__name__}")
        encode: Callable[[Any, Any], bytes]
        serde: Serde | None = None
        if isinstance(value, str) or is_serde(value):
            serde = resolved = resolve(value, f"{where} value", topic)
            encode = lambda _k, v: serde_dumps(resolved, v)  # noqa: E731
        elif callable(value):
            fn = value
            encode = lambda k, v: _as_bytes(fn(k, v), "value")  # noqa: E731
        else:
            raise PipelineError(
                f"{where} value: expected 'json', 'text', 'bytes', a serde or a function "
                f"fn(key, value) -> bytes, got {type(value).__name__}"
            )
        return SinkSpec(key, encode, headers, serde)


@dataclass(frozen=True)
class PostgresTarget:
    """Where and how a sink writes: the server (a libpq DSN), the table (``name`` or
    ``schema.name``), the columns of its primary key or a unique index (the upsert's
    conflict target), and ``columns(key, value) -> {column: value}``."""

    dsn: str
    table: tuple[str, ...]
    key_columns: tuple[str, ...]
    columns: Callable[[Any, Any], Mapping[str, Any]]

    def __repr__(self) -> str:  # never the DSN's password: reprs end up in logs
        return (
            f"PostgresTarget(dsn={redacted(self.dsn)!r}, table={self.table!r}, "
            f"key_columns={self.key_columns!r}, columns={self.columns!r})"
        )

    @staticmethod
    def of(dsn: Any, table: Any, key_columns: Any, columns: Any) -> PostgresTarget:
        """The target of ``sink_postgres(...)``; PipelineError (one line) if an argument is
        not what it should be, or psycopg is not installed."""
        where = f"sink_postgres({table!r})"
        if not isinstance(dsn, str) or not dsn:
            raise PipelineError(f"{where}: dsn must be a libpq connection string or URL")
        parts = tuple(table.split(".")) if isinstance(table, str) else ()
        if not 1 <= len(parts) <= 2 or not all(map(_IDENTIFIER.fullmatch, parts)):
            raise PipelineError(
                f"{where}: table must be 'name' or 'schema.name' (letters, digits, _ and $)"
            )
        if isinstance(key_columns, str) or not isinstance(key_columns, list | tuple):
            raise PipelineError(f"{where}: key_columns must be a list of column names")
        keys = tuple(key_columns)
        if (
            not keys
            or not all(isinstance(k, str) and k for k in keys)
            or len(set(keys)) < len(keys)
        ):
            raise PipelineError(f"{where}: key_columns must be distinct, non-empty names")
        if not callable(columns):
            raise PipelineError(f"{where}: columns must be a function fn(key, value) -> dict")
        if importlib.util.find_spec("psycopg") is None:
            raise PipelineError(f"{where} needs psycopg: pip install 'processor[postgres]'")
        return PostgresTarget(dsn, parts, keys, columns)


def _as_bytes(raw: Any, what: str) -> bytes:
    if type(raw) is bytes:
        return raw
    if isinstance(raw, bytearray | memoryview):
        return bytes(raw)
    raise RecordError(f"{what} function returned {type(raw).__name__}, not bytes")
