"""The exactly-once PostgreSQL sink against the Kafka sink, on the same pipeline and broker.

Two pipelines, each with one sink, either ``.sink(topic)`` (``kafka``) or
``.sink_postgres(...)`` (``postgres``):

- **rows**: stateless, a row per input record: JSON events ``{"id", "user", "amount"}`` into
  ``events (id bigint PRIMARY KEY, "user" text, amount double precision)``, or each event as
  JSON into a topic. Every id is distinct: nothing collapses.
- **counts**: word count (``flat_map`` of the word count's tokenizer, ``key_by``, ``count``)
  into ``word_counts (word text PRIMARY KEY, n bigint)``, or into a topic. The Kafka sink
  writes each changed count once per checkpoint; the PostgreSQL sink upserts the last row per
  key and checkpoint: the same rows, as upserts.

Each run: the input preloaded into a 2-partition topic of the run's own (the same values every
run), a fresh database with the empty table, then the job as real processes (coordinator + 2
workers, 2 shuffle partitions, checkpoint every 1000 ms, exactly-once) until the committed
output is complete (rows in the table / records in the topic; counts summing to the input's
words). Throughput is from the first committed output to the complete output: the input
committed in between over that time (``input_per_s``). Every run's output is checked exact
before it counts. The sinks alternate (kafka, postgres; then postgres, kafka; ...).

PostgreSQL runs on a server this script starts (tests/postgres_server.py) on the local
disk, with durable settings (``fsync``, ``synchronous_commit``, ``full_page_writes`` on: the
server's defaults; the tests' server turns them off) unless ``--pg-fast``; besides those,
``max_prepared_transactions=64``, ``max_connections=200``, ``listen_addresses=127.0.0.1``.
The broker is an existing one (``--bootstrap``). Before the first measured run the script
waits for the 1-minute load average to fall below ``--max-load`` (polling every 30 s, at most
``--wait-load-s``), and records the load before every run.

Writes ``bench/results/postgres-sink-<time>.json`` and prints a summary.

    python bench/postgres_sink.py --bootstrap 127.0.0.1:20992 --pg-port 15732 \\
        [--events 300000] [--words 5000000] [--runs 3] [--pipelines rows,counts] [--pg-fast]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import own_cpu_s, say
from processor import Pipeline
from processor.jobs.wordcount import line_words

RESULTS = Path(__file__).resolve().parent / "results"
INTERVAL_MS = 1000
PARTITIONS = 2
WORKERS = 2
# What the job's processes build, from their environment (set before PipelineRun copies it).
ENV_PIPELINE = "BENCH_PG_PIPELINE"  # rows | counts
ENV_SINK = "BENCH_PG_SINK"  # kafka | postgres
ENV_DSN = "BENCH_PG_DSN"
TABLES = {
    "rows": 'CREATE TABLE events (id bigint PRIMARY KEY, "user" text NOT NULL,'
    " amount double precision NOT NULL)",
    "counts": "CREATE TABLE word_counts (word text PRIMARY KEY, n bigint NOT NULL)",
}
# The coordinator's line for each completed checkpoint: its duration (trigger to complete)
# and the records the job read in it.
_COMPLETE = re.compile(r"checkpoint \d+ complete in ([\d.]+)s: (\d+) records")
TABLE_NAMES = {"rows": "events", "counts": "word_counts"}
# Durable: PostgreSQL's own defaults for these three (tests/postgres_server.py turns them
# off for tests). The other settings of postgres_server.SETTINGS stay.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
SHOWN = [
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "max_prepared_transactions",
    "max_connections",
]


def build(source: str = "input", out: str = "out") -> Pipeline:
    """The job: ``ENV_PIPELINE`` (rows | counts) into ``ENV_SINK`` (kafka | postgres)."""
    p = Pipeline()
    dsn = os.environ.get(ENV_DSN, "postgresql://unset@127.0.0.1/unset")
    to_postgres = os.environ.get(ENV_SINK) == "postgres"
    if os.environ.get(ENV_PIPELINE) == "counts":
        counts = p.source(source).flat_map(line_words).key_by(str).count()
        if to_postgres:
            counts.sink_postgres(dsn, "word_counts", ["word"], lambda w, n: {"word": w, "n": n})
        else:
            counts.sink(out)
    else:
        events = p.source(source, value="json")
        if to_postgres:
            events.sink_postgres(
                dsn,
                "events",
                ["id"],
                lambda _k, e: {"id": e["id"], "user": e["user"], "amount": e["amount"]},
            )
        else:
            events.sink(out)
    return p


# ---------------------------------------------------------------------------- input


def event_values(n: int) -> list[bytes]:
    """``n`` JSON events, ids 0..n-1, 1,000 users, amounts to the cent."""
    return [
        json.dumps({"id": i, "user": f"u{i % 1000}", "amount": (i * 7919 % 100_000) / 100}).encode()
        for i in range(n)
    ]


# ---------------------------------------------------------------------------- watching


class KafkaWatch:
    """A read_committed reader of the output topic: records so far, and for counts the sum of
    each word's latest count (the input words committed)."""

    def __init__(self, bootstrap: str, topic: str, counts: bool) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-pg-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.max.bytes": 52_428_800,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        self.counts = counts
        self.latest: dict[bytes | None, int] = {}
        self.records = 0
        self.total = 0  # counts: Σ latest count per word

    def poll(self) -> tuple[int, int]:
        """(records, progress): progress is records (rows) or Σ latest counts (counts)."""
        for msg in self.consumer.consume(10_000, 0.1):
            if msg.error() is not None:
                raise RuntimeError(f"output reader: {msg.error()}")
            self.records += 1
            if self.counts:
                n = int(msg.value() or b"0")
                self.total += n - self.latest.get(msg.key(), 0)
                self.latest[msg.key()] = n
        return self.records, (self.total if self.counts else self.records)

    def close(self) -> None:
        self.consumer.close()


class PostgresWatch:
    """The table's committed rows so far, polled every 0.2 s; for counts also Σ n."""

    def __init__(self, dsn: str, pipeline: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.query = (
            "SELECT count(*), coalesce(sum(n), 0) FROM word_counts"
            if pipeline == "counts"
            else "SELECT count(*), count(*) FROM events"
        )
        self._next = 0.0

    def poll(self) -> tuple[int, int]:
        time.sleep(max(0.0, self._next - time.monotonic()))
        self._next = time.monotonic() + 0.2
        row = self.conn.execute(self.query).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self.conn.close()


# ---------------------------------------------------------------------------- one run


def _postgres_cpu_s(data_dir: Path) -> float:
    """CPU seconds of the server's process tree (ended backends counted in the postmaster's
    children's time)."""
    from bench.harness.measure import ProcessSampler

    pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    return ProcessSampler([pid]).sample()


def _broker_cpu_s(broker_dir: Path | None) -> float | None:
    from bench.harness.measure import process_cpu_s

    if broker_dir is None or not (broker_dir / "kafka.pid").is_file():
        return None
    return process_cpu_s(int((broker_dir / "kafka.pid").read_text().split()[0]))


def _verify(
    pipeline: str, sink: str, bootstrap: str, topic: str, dsn: str, expected: Any
) -> dict[str, Any]:
    """The committed output against the input: exact, or AssertionError."""
    import psycopg

    from tests.integration.pipeline_run import last_per_key, read_committed

    if sink == "postgres":
        with psycopg.connect(dsn, autocommit=True) as conn:
            if pipeline == "counts":
                got: dict[str, int] = dict(
                    conn.execute("SELECT word, n FROM word_counts").fetchall()
                )
                assert got == expected, f"word_counts: {len(got)} words, not the exact count"
            else:
                n, ids, amount = conn.execute(
                    "SELECT count(*), count(DISTINCT id), sum(amount) FROM events"
                ).fetchone() or (0, 0, 0)
                assert n == ids == expected["n"], f"events: {n} rows, {ids} ids"
                assert abs(amount - expected["amount"]) < 0.01 * n, "events: amounts differ"
            stats = conn.execute(
                "SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE relname = %s",
                (TABLE_NAMES[pipeline],),
            ).fetchone() or (0, 0)
            left = conn.execute(
                "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
            ).fetchone()
        return {
            "rows_inserted": int(stats[0]),
            "rows_updated": int(stats[1]),
            "rows_written": int(stats[0]) + int(stats[1]),
            "prepared_left": int(left[0]) if left else None,
        }
    parts = read_committed(bootstrap, topic)
    if pipeline == "counts":
        final = {k.decode(): int(v) for k, v in last_per_key(parts).items() if k and v}
        assert final == expected, f"{topic}: {len(final)} words, not the exact count"
    else:
        ids = Counter(json.loads(v or b"")["id"] for part in parts.values() for _, v, _ in part)
        assert len(ids) == expected["n"] and set(ids.values()) == {1}, f"{topic}: not each id once"
    return {"rows_written": sum(len(p) for p in parts.values())}


def run_once(
    pipeline: str,
    sink: str,
    args: argparse.Namespace,
    values: list[bytes],
    total: int,
    expected: Any,
    admin_dsn: str,
    pg_dir: Path,
) -> dict[str, Any]:
    """One run of ``pipeline`` into ``sink``: its figures, once its output was verified."""
    import psycopg

    from bench.harness.measure import ProcessSampler, machine_busy_s
    from processor.kafka import clients
    from tests.integration.pipeline_run import PipelineRun

    database = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{database}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLES[pipeline])
    os.environ.update({ENV_PIPELINE: pipeline, ENV_SINK: sink, ENV_DSN: dsn})
    workdir = Path(tempfile.mkdtemp(prefix="bench-pgsink-"))
    run = PipelineRun(
        args.bootstrap,
        workdir,
        Path(__file__).resolve(),
        {"source": "input", "out": "out"},
        source_partitions=PARTITIONS,
        interval_ms=INTERVAL_MS,
        shuffle_partitions=str(PARTITIONS),
        expected_workers=str(WORKERS),
    )
    source, out = run.topics["source"], run.topics["out"]
    clients.ensure_topic(run._admin, out, PARTITIONS)  # what the job would create: shuffle's
    run.send_placed((source, v, i % PARTITIONS, None) for i, v in enumerate(values))
    watch: KafkaWatch | PostgresWatch = (
        PostgresWatch(dsn, pipeline)
        if sink == "postgres"
        else KafkaWatch(args.bootstrap, out, pipeline == "counts")
    )
    load = os.getloadavg()
    children0 = os.times()
    started = time.monotonic()
    run.start_coordinator(exit_when_idle=False)
    for i in range(WORKERS):
        run.start_worker(i)
    job = ProcessSampler([p.pid for p in [run.coordinator, *run.workers.values()] if p])
    first: dict[str, float] = {}
    try:
        deadline = started + args.timeout
        while True:
            records, progress = watch.poll()
            now = time.monotonic()
            if progress and not first:
                first = {
                    "t": now,
                    "progress": progress,
                    "records": records,
                    "own_cpu": own_cpu_s(),
                    "job_cpu": job.sample(),
                    "pg_cpu": _postgres_cpu_s(pg_dir),
                    "broker_cpu": _broker_cpu_s(args.broker_dir) or 0.0,
                    "busy": machine_busy_s(),
                }
            if progress >= total:
                break
            if now > deadline or run.dead_workers():
                raise RuntimeError(
                    f"{pipeline}/{sink}: {progress} of {total} after {now - started:.0f}s"
                    f" (dead workers: {run.dead_workers()}); logs in {workdir}"
                )
        end = {
            "t": now,
            "own_cpu": own_cpu_s(),
            "job_cpu": job.sample(),
            "pg_cpu": _postgres_cpu_s(pg_dir),
            "broker_cpu": _broker_cpu_s(args.broker_dir) or 0.0,
            "busy": machine_busy_s(),
        }
    finally:
        watch.close()
        run.stop()
    children1 = os.times()
    done_checkpoints = [
        (float(d), int(n)) for d, n in _COMPLETE.findall(run.log("coordinator")) if int(n) > 0
    ]
    checked = _verify(pipeline, sink, args.bootstrap, out, dsn, expected)
    window = end["t"] - first["t"]
    done = total - first["progress"]
    share = done / total  # of the run's rows, those of the window (estimated so)
    result = {
        "pipeline": pipeline,
        "sink": sink,
        "input": total,
        "load_avg_before": [round(x, 2) for x in load],
        "first_output_s": round(first["t"] - started, 3),
        "complete_s": round(end["t"] - started, 3),
        "window_s": round(window, 3),
        "input_in_window": done,
        "input_per_s": round(done / window),
        "input_per_s_from_start": round(total / (end["t"] - started)),
        **checked,
        "rows_per_s": round(checked["rows_written"] * share / window),
        "cpu_s_in_window": {
            "job": round(end["job_cpu"] - first["job_cpu"], 2),
            "postgres": round(end["pg_cpu"] - first["pg_cpu"], 2),
            "broker": round(end["broker_cpu"] - first["broker_cpu"], 2)
            if args.broker_dir
            else None,
            "harness": round(end["own_cpu"] - first["own_cpu"], 2),
        },
        "machine_busy_pct_in_window": round(
            100 * (end["busy"] - first["busy"]) / window / (os.cpu_count() or 1), 1
        ),
        "job_cpu_s_whole_run": round(
            children1.children_user
            + children1.children_system
            - children0.children_user
            - children0.children_system,
            2,
        ),
    }
    if done_checkpoints:
        durations = sorted(d for d, _ in done_checkpoints)
        result["checkpoints_with_records"] = len(done_checkpoints)
        result["checkpoint_s_median"] = round(statistics.median(durations), 3)
        result["checkpoint_s_max"] = durations[-1]
    result["job_cpu_s_per_m_input"] = round(1e6 * result["cpu_s_in_window"]["job"] / done, 3)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
    admin = run._admin
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(run.job)]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result()
    shutil.rmtree(workdir, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------- main


def wait_for_quiet(max_load: float, max_wait_s: float) -> dict[str, Any]:
    """Until the 1-minute load average is below ``max_load`` (every 30 s, at most
    ``max_wait_s``); what it was when measuring started."""
    began = time.monotonic()
    while (load := os.getloadavg())[0] >= max_load and time.monotonic() - began < max_wait_s:
        say(f"load {load[0]:.2f} >= {max_load}: waiting")
        time.sleep(30)
    return {
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "waited_s": round(time.monotonic() - began),
        "quiet": os.getloadavg()[0] < max_load,
    }


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per pipeline and sink, and the ratio PostgreSQL / Kafka per pipeline."""
    rows = []
    for pipeline in dict.fromkeys(r["pipeline"] for r in runs):
        row: dict[str, Any] = {"pipeline": pipeline}
        for sink in ("kafka", "postgres"):
            mine = [r for r in runs if r["pipeline"] == pipeline and r["sink"] == sink]
            if not mine:
                continue

            def median(key: str, of: list[dict[str, Any]] = mine) -> float:
                return float(statistics.median(r[key] for r in of))

            row[sink] = {
                "runs": len(mine),
                "input_per_s": round(median("input_per_s")),
                "input_per_s_all": [r["input_per_s"] for r in mine],
                "input_per_s_from_start": round(median("input_per_s_from_start")),
                "rows_written": round(median("rows_written")),
                "rows_per_s": round(median("rows_per_s")),
                "first_output_s": round(median("first_output_s"), 2),
                "checkpoints_with_records": [r.get("checkpoints_with_records") for r in mine],
                "checkpoint_s_median": [r.get("checkpoint_s_median") for r in mine],
                "job_cpu_s_per_m_input": round(median("job_cpu_s_per_m_input"), 3),
                "cpu_s_in_window": {
                    k: statistics.median(r["cpu_s_in_window"][k] for r in mine)
                    if mine[0]["cpu_s_in_window"][k] is not None
                    else None
                    for k in mine[0]["cpu_s_in_window"]
                },
            }
        if "kafka" in row and "postgres" in row:
            for key, name in (("input_per_s", ""), ("input_per_s_from_start", "_from_start")):
                row[f"ratio_postgres_to_kafka{name}"] = round(
                    row["postgres"][key] / row["kafka"][key], 3
                )
        rows.append(row)
    return rows


def main() -> int:
    from processor.jobs.wordcount import words
    from tests import postgres_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:20992")
    parser.add_argument(
        "--broker-dir", type=Path, default=None, help="its data dir: its CPU from kafka.pid"
    )
    parser.add_argument("--pg-port", type=int, default=15732)
    parser.add_argument("--pg-fast", action="store_true", help="the tests' fsync=off server")
    parser.add_argument("--events", type=int, default=300_000, help="rows: input events")
    parser.add_argument("--words", type=int, default=5_000_000, help="counts: input words")
    parser.add_argument("--runs", type=int, default=3, help="runs per pipeline and sink")
    parser.add_argument("--pipelines", default="rows,counts")
    parser.add_argument("--timeout", type=float, default=600, help="per run, seconds")
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--wait-load-s", type=float, default=1500)
    args = parser.parse_args()
    pipelines = args.pipelines.split(",")

    inputs: dict[str, tuple[list[bytes], int, Any]] = {}
    if "rows" in pipelines:
        values = event_values(args.events)
        amount = sum(json.loads(v)["amount"] for v in values)
        inputs["rows"] = (values, args.events, {"n": args.events, "amount": amount})
    if "counts" in pipelines:
        from processor.commands import corpus

        lines = list(corpus.lines(args.words, seed=1))
        expected = Counter(words(lines))
        inputs["counts"] = ([x.encode() for x in lines], sum(expected.values()), dict(expected))

    base = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    base.chmod(0o755)  # as root the server runs as `postgres`, which must reach its data dir
    settings = {} if args.pg_fast else DURABLE
    with mock.patch.dict(postgres_server.SETTINGS, settings):
        admin_dsn = postgres_server.start(base / "data", args.pg_port)
    runs: list[dict[str, Any]] = []
    try:
        import psycopg

        with psycopg.connect(admin_dsn) as conn:
            server = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SHOWN}  # type: ignore[index]
        say(f"PostgreSQL {server}")
        quiet = wait_for_quiet(args.max_load, args.wait_load_s)
        say(f"measuring: {quiet}")
        for n in range(args.runs):
            for pipeline in pipelines:
                values, total, expected = inputs[pipeline]
                order = ["kafka", "postgres"] if n % 2 == 0 else ["postgres", "kafka"]
                for sink in order:
                    result = run_once(
                        pipeline, sink, args, values, total, expected, admin_dsn, base / "data"
                    )
                    result["round"] = n
                    runs.append(result)
                    print(json.dumps(result), flush=True)
    finally:
        postgres_server.stop(base / "data")
        shutil.rmtree(base, ignore_errors=True)
    summary = summarize(runs)
    for row in summary:
        print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"postgres-sink-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "command": " ".join(["python", "bench/postgres_sink.py", *sys.argv[1:]]),
                "checkpoint_interval_ms": INTERVAL_MS,
                "workers": WORKERS,
                "partitions": PARTITIONS,
                "events": args.events,
                "words": args.words,
                "postgres": {
                    "durable": not args.pg_fast,
                    "settings": {**postgres_server.SETTINGS, **settings},
                    "shown": server,
                },
                "machine": {"cpus": os.cpu_count(), **quiet},
                "summary": summary,
                "runs": runs,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
