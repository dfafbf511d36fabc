"""The stateless PostgreSQL sink test's pipeline: a row per input record, written by the
source tasks themselves (no keyed stage), into ``events (id PRIMARY KEY, body jsonb)``.

The database comes from PROCESSOR_TEST_PG_SINK_DSN: the test sets it for its processes.
"""

from __future__ import annotations

import os

from processor import Pipeline

DSN = os.environ.get("PROCESSOR_TEST_PG_SINK_DSN", "postgresql://unset@127.0.0.1/unset")

TABLES = """
CREATE TABLE events (id bigint PRIMARY KEY, body jsonb NOT NULL);
CREATE TABLE event_log (seq bigserial PRIMARY KEY, id bigint NOT NULL);
CREATE FUNCTION log_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO event_log (id) VALUES (NEW.id);
  RETURN NEW;
END $$;
CREATE TRIGGER event_log AFTER INSERT OR UPDATE ON events
  FOR EACH ROW EXECUTE FUNCTION log_event();
"""


def build(events: str = "events") -> Pipeline:
    p = Pipeline()
    p.source(events, value="json").filter(lambda e: e["id"] % 7 != 3).sink_postgres(
        DSN, "events", ["id"], lambda _k, e: {"id": e["id"], "body": e}
    )
    return p
