"""What bench/run.py measures: the broker's ports, the common settings, the modes (quick and
full), the systems compared and the steady state's rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness.steady import (
    SteadyMode,
)
from bench.peers.base import Peer
from bench.peers.ceiling_peer import CeilingPeer
from bench.peers.flink_peer import FlinkPeer
from bench.peers.flink_preagg_peer import FlinkPreAggPeer
from bench.peers.flink_sql_peer import FlinkSqlPeer
from bench.peers.kstreams_peer import KafkaStreamsPeer, KafkaStreamsPreAggPeer
from bench.peers.processor_peer import (
    ProcessorPeer,
)
from bench.peers.quix_peer import QuixPeer

PORT = 29092
CONTROLLER_PORT = 29093
PARTITIONS = 4
INTERVAL_MS = 1000
PARALLELISM = 2
PEERS: dict[str, type[Peer]] = {
    "processor": ProcessorPeer,
    "kafka_streams": KafkaStreamsPeer,
    "quix": QuixPeer,
    "flink": FlinkPeer,
}
RESULTS = Path(__file__).resolve().parents[1] / "results"
EMIT_RECORD = Path(__file__).resolve().parents[1] / "pipelines" / "wordcount_emit_record.py"


@dataclass(frozen=True)
class Mode:
    name: str
    words: int
    latency_rates: tuple[int, ...]  # words per second; the first one is the headline
    latency_warmup_s: float
    latency_s: float
    recovery_words: int  # 0: no recovery phase
    timeout_s: float  # for one system to reach the exact output
    scaling_keys: tuple[int, ...]  # state sizes of the state-scaling phase (distinct keys)
    scaling_trickle_s: float  # steady state measured after each state is built
    # Checkpoint/commit intervals of the latency phase, and whether each system also runs at
    # half its steady-state median (a backlog's rate, not one it sustains live with a
    # producer beside it: bench/sustainable.py searches for that one).
    latency_intervals: tuple[int, ...] = (INTERVAL_MS,)
    latency_half_max: bool = False
    # Runs per half-capacity point (bench/harness/latency_jvm.py).
    latency_runs: int = 1


QUICK = Mode("quick", 300_000, (20_000, 5_000), 3.0, 10.0, 0, 240.0, (100_000, 1_000_000), 5.0)
FULL = Mode(
    "full",
    4_000_000,
    (20_000,),
    5.0,
    30.0,
    2_000_000,
    1200.0,
    (1_000_000, 10_000_000),
    20.0,
    latency_intervals=(100, 250, 500, 1000),
    latency_half_max=True,
    latency_runs=3,
)
# What one Python RateProducer line loop sends at most here, shared with the system: the
# fixed rates stay under it; the half-capacity points use the JVM producer instead
# (bench/harness/latency_jvm.py) and are not capped.
MAX_LATENCY_RATE = 500_000
# The steady-state phase (bench/harness/steady.py): the shared input's size, warm-up, window,
# runs per row. Quick (CI): one short run per row, only to show that every row works end to end;
# the fastest rows (the ceiling, flink_preagg at up to ~6 M words/s) may read all of it before
# the window ends: measured to the input's end then, and the report says so.
# A stall there is 120 s of flat progress, not 30: the CI machine's disk once stood still for
# 31 s under the suite's load (the broker's "writeNoOpRecord took 31091 ms"), and every client
# then waits out its timeouts before it goes on; quick mode verifies, it does not time.
QUICK_STEADY = SteadyMode(
    words=30_000_000, warmup_s=5.0, window_s=10.0, reps=1, pool_words=300_000, stall_s=120.0
)
# The backlog is the secondary figure since #29 (the balanced live capacity is the headline):
# a 30 s window, so that the full run's phases fit in a sitting. 320 M words outlast 10 + 30 s
# of the fastest row: flink_preagg read 5.4 M words/s on a 100 M-word backlog (0.32 CPU s per
# M words, 2026-12-05), 40 s of it about 220 M.
FULL_STEADY = SteadyMode(words=320_000_000, warmup_s=10.0, window_s=30.0, reps=5)


@dataclass(frozen=True)
class Row:
    """One row of the steady-state phase: a peer at a configuration."""

    key: str  # in the report
    peer: Peer
    interval_ms: int
    note: str = ""


def steady_rows(names: Sequence[str]) -> list[Row]:
    """Every chosen system at the common settings, the variants the comparison needs next to
    them, and the ceiling. A peer added to PEERS gets its row with nothing more to do."""
    rows = [Row(n, PEERS[n](), INTERVAL_MS) for n in names]
    if "kafka_streams" in names:
        rows.append(
            Row(
                "kafka_streams_commit_100ms",
                KafkaStreamsPeer(),
                100,
                "commit.interval.ms=100, Kafka Streams' default under exactly-once",
            )
        )
        rows.append(
            Row(
                "kafka_streams_preagg",
                KafkaStreamsPreAggPeer(),
                INTERVAL_MS,
                "a combiner before the repartition: per-task partial sums in a cached, logged "
                "store, forwarded at each commit-interval punctuation (processor's combiner)",
            )
        )
    if "flink" in names:
        rows.append(
            Row(
                "flink_sql",
                FlinkSqlPeer(),
                INTERVAL_MS,
                "Flink SQL: mini-batch (allow-latency = the interval, size 2,000,000: above "
                "rate x interval), TWO_PHASE local-global COUNT, upsert-kafka exactly-once: "
                "the combiner's counterpart",
            )
        )
        rows.append(
            Row(
                "flink_preagg",
                FlinkPreAggPeer(),
                INTERVAL_MS,
                "Flink DataStream with a pre-aggregating operator chained to the tokenizer, "
                "flushed in prepareSnapshotPreBarrier: the combiner's counterpart",
            )
        )
    if "processor" in names:
        rows.append(
            Row(
                "processor_at_least_once",
                ProcessorPeer(env={"PROCESSOR_GUARANTEE": "at_least_once"}),
                INTERVAL_MS,
                "PROCESSOR_GUARANTEE=at_least_once: no alignment, no transactions",
            )
        )
        rows.append(
            Row(
                "processor_no_combiner",
                ProcessorPeer(env={"PROCESSOR_COMBINE": "false"}),
                INTERVAL_MS,
                "PROCESSOR_COMBINE=false: every word through the shuffle, as in the peers",
            )
        )
        rows.append(
            Row(
                "processor_emit_record",
                ProcessorPeer(pipeline=f"{EMIT_RECORD}:pipeline"),
                INTERVAL_MS,
                'count(emit="record"): no combining, one output record per input word, '
                "as the peers' per-word updates",
            )
        )
    rows.append(Row("ceiling", CeilingPeer(), INTERVAL_MS, "no state, no output"))
    rows.append(
        Row(
            "ceiling_uncombined",
            CeilingPeer(forward_every_word=True),
            INTERVAL_MS,
            "the ceiling's readers also produce every word to a shuffle topic, non-transactionally",
        )
    )
    return rows


def steady_row_keys(names: list[str], rows: str | None) -> set[str] | None:
    """The steady-state rows ``--rows`` picks from the rows of ``names`` (None: every row);
    ValueError for a row those systems do not have."""
    if not rows:
        return None
    wanted = {r.strip() for r in rows.split(",") if r.strip()}
    known = {row.key for row in steady_rows(names)}
    unknown = wanted - known
    if unknown:
        raise ValueError(f"unknown steady rows {sorted(unknown)}; known: {sorted(known)}")
    return wanted
