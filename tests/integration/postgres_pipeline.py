"""The pipeline of the PostgreSQL sink tests: word count into a table, and the same counts
into a Kafka topic, from the same operator (so in the same transactions), and a first sight
per word (the line it was first seen in: order-sensitive) into a second table.

The database comes from PROCESSOR_TEST_PG_SINK_DSN: the test sets it for its processes.
"""

from __future__ import annotations

import os
from typing import Any

from processor import Pipeline

DSN = os.environ.get("PROCESSOR_TEST_PG_SINK_DSN", "postgresql://unset@127.0.0.1/unset")
# Set: a map inserted before the counts' table sink, which renames it (and its writers).
INSERT_MAP = bool(os.environ.get("PROCESSOR_TEST_PG_INSERT_MAP"))

TABLES = """
CREATE TABLE word_counts (word text PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE first_seen (word text PRIMARY KEY, line bigint NOT NULL, detail jsonb);
-- Every write that commits, in order: a duplicate or lost epoch shows here, not in an upsert.
CREATE TABLE count_log (id bigserial PRIMARY KEY, word text NOT NULL, n bigint NOT NULL);
CREATE FUNCTION log_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO count_log (word, n) VALUES (NEW.word, NEW.n);
  RETURN NEW;
END $$;
CREATE TRIGGER count_log AFTER INSERT OR UPDATE ON word_counts
  FOR EACH ROW EXECUTE FUNCTION log_count();
"""


def _words(line: Any) -> list[tuple[str, int]]:
    return [(word, line["i"]) for word in line["text"].split()]


def _first_sight(pair: tuple[str, int], state: Any) -> list[int]:
    if state.get() is not None:
        return []
    state.set(pair[1])
    return [pair[1]]


def build(lines: str = "lines", counts: str = "counts") -> Pipeline:
    p = Pipeline()
    words = p.source(lines, value="json").flat_map(_words)
    keyed = words.key_by(lambda pair: pair[0])
    counted = keyed.count()
    into_table = counted.map(lambda n: n) if INSERT_MAP else counted
    into_table.sink_postgres(DSN, "word_counts", ["word"], lambda w, n: {"word": w, "n": n})
    counted.sink(counts)
    keyed.process(_first_sight, name="first").sink_postgres(
        DSN,
        "first_seen",
        key_columns=["word"],
        columns=lambda w, line: {"word": w, "line": line, "detail": {"line": line}},
    )
    return p
