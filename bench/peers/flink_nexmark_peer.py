"""Apache Flink 2.2.1 SQL running one Nexmark query (issue #42): ``bench.NexmarkSql`` in
bench/flink/ (the word counts' jar and runtime) runs bench/flink/nexmark/source.sql (the
``nexmark`` topic as a table, a view per event kind) and ``<query>.sql`` (the sink table and the
``INSERT``), rendered here with the job's topics and connector options.

Every setting, and why:

- source: the ``kafka`` connector over the events topic, ``format = json`` mapping each
  one-member object to three nullable ROW columns (``Person``, ``Auction``, ``Bid``); event time
  ``ts`` = the member's ``date_time`` (ms) with ``WATERMARK FOR ts AS ts - INTERVAL '1'
  SECOND`` (the engine's ``out_of_orderness_ms``); read_committed, from the earliest offset,
  offsets committed to the group ``job.name`` on checkpoints; with ``bounded`` the source stops
  at the offsets that were the latest when the job started (``scan.bounded.mode =
  latest-offset``): the end of input brings the final watermark, which closes every window, as
  the engine's end of input does, and the job finishes after its final checkpoint.
- sinks: insert-only queries (q0-q3, q5, q7, q8) the ``kafka`` connector, ``format = json``;
  updating ones (q4, q6) ``upsert-kafka`` keyed by the group key (``key.format`` and
  ``value.format`` json, ``value.fields-include = ALL``: the value is the whole row, a delete a
  tombstone). Both ``sink.delivery-guarantee = exactly-once`` with
  ``sink.transactional-id-prefix`` = the job name, ``transaction.timeout.ms = 60000`` and the
  producer batching every peer gets (lz4, 512 KB batches, 20 ms linger).
- runtime (bench/flink/.../JobRuntime.java): exactly-once aligned checkpoints every
  ``interval_ms`` (1000 ms, processor's default ``checkpoint_interval_ms``), RocksDB with
  incremental checkpoints, object reuse.
- table: ``table.exec.mini-batch.enabled = true``, ``allow-latency`` = the checkpoint interval,
  ``size`` = max(rate x interval, ``MIN_MINI_BATCH``); ``table.optimizer.agg-phase-strategy =
  TWO_PHASE``; ``table.local-time-zone = UTC`` (window bounds as the events' epoch ms).
"""

from __future__ import annotations

import shutil
import string
from pathlib import Path
from typing import ClassVar

from bench.peers.base import Job, Running, build_jar, spawn
from bench.peers.flink_cluster import FlinkSessionCluster
from bench.peers.flink_peer import JAR, PROJECT

MAIN = "bench.NexmarkSql"
SQL = PROJECT / "nexmark"
QUERIES = tuple(f"q{i}" for i in range(9))
UPDATING = frozenset({"q4", "q6"})
# The key column of each updating query's upsert sink.
KEYS = {"q4": "category", "q6": "seller"}
HEAP = ("-Xms512m", "-Xmx1g")
TRANSACTION_TIMEOUT_MS = 60_000  # JobRuntime.TRANSACTION_TIMEOUT_MS
PRODUCER_TUNING = {"compression.type": "lz4", "batch.size": "524288", "linger.ms": "20"}
# The mini-batch's record bound never below this (SqlWordCount's size): a batch is bounded by
# its latency (the checkpoint interval) first; ``size`` only caps the heap a batch may hold.
MIN_MINI_BATCH = 100_000
DEFAULT_RATE = 200_000  # events/s the size is made for when the caller names no rate


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def options(pairs: dict[str, str]) -> str:
    return ", ".join(f"{quote(k)} = {quote(v)}" for k, v in pairs.items())


def mini_batch_size(rate: int, interval_ms: int) -> int:
    """At least what arrives in one interval at ``rate`` events/s, so that the latency bound
    (one interval), not the count, ends a batch."""
    return max(MIN_MINI_BATCH, rate * interval_ms // 1000)


def render(query: str, job: Job, bounded: bool = True) -> str:
    """The script NexmarkSql runs: the source, its views, the query's sink and INSERT."""
    source = {
        "connector": "kafka",
        "topic": job.input_topic,
        "properties.bootstrap.servers": job.bootstrap,
        "properties.group.id": job.name,
        "properties.isolation.level": "read_committed",
        "scan.startup.mode": "earliest-offset",
        **({"scan.bounded.mode": "latest-offset"} if bounded else {}),
        "format": "json",
    }
    sink_common = {
        "topic": job.output_topic,
        "properties.bootstrap.servers": job.bootstrap,
        "sink.delivery-guarantee": "exactly-once",
        "sink.transactional-id-prefix": job.name,
        "properties.transaction.timeout.ms": str(TRANSACTION_TIMEOUT_MS),
        **{f"properties.{k}": v for k, v in PRODUCER_TUNING.items()},
    }
    append = {"connector": "kafka", "format": "json", **sink_common}
    upsert = {
        "connector": "upsert-kafka",
        "key.format": "json",
        "value.format": "json",
        "value.fields-include": "ALL",
        **sink_common,
    }
    values = {
        "source_options": options(source),
        "append_sink": options(append),
        "upsert_sink": options(upsert),
    }
    text = (SQL / "source.sql").read_text() + "\n" + (SQL / f"{query}.sql").read_text()
    return string.Template(text).substitute(values)


def arguments(query: str, job: Job, script: Path, rate: int) -> list[str]:
    """NexmarkSql's command line; writes the rendered script to ``script``."""
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render(query, job, bounded=job.until_idle))
    return [
        job.bootstrap,
        str(script),
        job.name,
        str(job.workdir / "flink"),
        str(job.parallelism),
        str(job.interval_ms),
        str(mini_batch_size(rate, job.interval_ms)),
    ]


class FlinkNexmarkPeer:
    """One query per job, on an embedded MiniCluster (``start``) or submitted to a session
    cluster (``submit``). ``job.until_idle`` makes the source bounded (the job ends after the
    backlog)."""

    name: ClassVar[str] = "flink_sql"
    title: ClassVar[str] = "Apache Flink 2.2.1 SQL (mini-batch, two-phase)"

    def __init__(self, query: str, rate: int = DEFAULT_RATE) -> None:
        if query not in QUERIES:
            raise ValueError(f"unknown query {query!r}")
        self.query = query
        self.rate = rate

    def prepare(self) -> None:
        build_jar(PROJECT, JAR, "Flink")

    def start(self, job: Job) -> Running:
        java = shutil.which("java") or "java"
        args = arguments(self.query, job, job.workdir / f"{self.query}.sql", self.rate)
        log = job.workdir / f"flink-{self.query}.log"
        return Running([spawn([java, *HEAP, "-cp", str(JAR), MAIN, *args], log)], [log])

    def submit(self, cluster: FlinkSessionCluster, job: Job, timeout: float = 180) -> str:
        """Detached to ``cluster``; the job id. ``timeout``: for the client, which plans the
        SQL (minutes on a machine loaded by other work)."""
        args = arguments(self.query, job, job.workdir / f"{self.query}.sql", self.rate)
        log = job.workdir / f"submit-{self.query}.log"
        return cluster.submit(args, log, timeout=timeout, main_class=MAIN)

    def settings(self, interval_ms: int = 1000) -> dict[str, object]:
        return {
            "query": f"bench/flink/nexmark/{self.query}.sql after source.sql",
            "source": "'kafka', format json (Person/Auction/Bid ROW columns), watermark ts - "
            "1 s, read_committed, earliest-offset; scan.bounded.mode=latest-offset for a "
            "backlog run",
            "sink": (
                "'upsert-kafka' keyed by " + KEYS[self.query]
                if self.query in UPDATING
                else "'kafka'"
            )
            + ", json, sink.delivery-guarantee=exactly-once, transactional-id-prefix = job "
            f"name, transaction.timeout.ms={TRANSACTION_TIMEOUT_MS}, producer "
            + ", ".join(f"{k}={v}" for k, v in PRODUCER_TUNING.items()),
            "checkpointing": f"EXACTLY_ONCE every {interval_ms} ms (processor's default), aligned",
            "state": "RocksDB (state.backend.type: rocksdb), incremental checkpoints",
            "table.exec.mini-batch.enabled": "true",
            "table.exec.mini-batch.allow-latency": f"{interval_ms} ms (the checkpoint interval)",
            "table.exec.mini-batch.size": f"{mini_batch_size(self.rate, interval_ms)} "
            f"(max(rate {self.rate}/s x interval, {MIN_MINI_BATCH}))",
            "table.optimizer.agg-phase-strategy": "TWO_PHASE",
            "table.local-time-zone": "UTC",
            "pipeline.object-reuse": "true",
        }
