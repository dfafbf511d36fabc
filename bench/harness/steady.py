"""Steady-state throughput: the slope of a job's committed input offsets, after a warm-up.

bench/run.py's first phase times a small backlog to the exact output: mostly start-up and
pipeline delay. This phase measures every system the same way while it runs at full speed:

* one large input topic (``steady.input``, 4 partitions), produced once per bench run from a
  pool of seeded Zipf lines, and read from the beginning by every run under a fresh consumer
  group; every other topic (output, shuffle, changelog, the engine's own) is new per run and
  deleted after it;
* every second the group's committed offsets of the input topic (AdminClient
  ``list_consumer_group_offsets``: committed transactions only), turned into input words with
  the per-partition prefix sums of the words per line;
* warm-up from the first committed progress (JVM JIT, group rebalances, RocksDB opening: all
  before the window), then the window; the figure is the least-squares slope of committed
  words over the samples in the window. If the input runs out first, the window ends there
  (``window_s`` says how long it was; too few samples left: from the first progress,
  ``warmup_cut_short``). Committed progress that is flat at the planned end is waited out: a
  system that read all its input may commit its last offsets late (Flink: up to 10 s), and
  that plateau is left out when the system was idle over it (``final_plateau``); no progress
  for ``stall_s`` with input left is a stall, and the run is not ok (bench/harness/window.py);
* CPU of the system's process tree, of the broker and of the whole machine within the window;
  after the stop, what the run wrote to the broker, per topic kind.

The same module runs Kafka's own ``ConsumerPerformance`` (kafka-consumer-perf-test) on the
input topic: a Java reader that does no work at all.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.harness.common import cores, every
from bench.harness.common import own_cpu_s as _own_cpu_s
from bench.harness.measure import (
    ProcessSampler,
    _producer,
    create_topic,
    machine_busy_s,
    process_cpu_s,
    slope,
    words_of,
)
from bench.harness.window import (
    IDLE_CORES,
    Span,
    Timeline,
    flat_for,
    measured_span,
    window_over,
)
from bench.peers.base import Job, Peer
from processor.commands import corpus
from processor.kafka.clients import produce_waiting
from processor.localkafka.broker import LocalBroker
from processor.localkafka.tools import tools_libs

INPUT_TOPIC = "steady.input"
PERF_CLASS = "org.apache.kafka.tools.ConsumerPerformance"


@dataclass(frozen=True)
class SteadyMode:
    words: int  # size of the shared input topic
    warmup_s: float
    window_s: float
    reps: int
    pool_words: int = 2_000_000  # distinct seeded lines the input is drawn from
    sample_s: float = 1.0
    first_progress_timeout_s: float = 180.0
    # Flat committed progress at the planned end of the window: waited out (it may be the
    # input's end committed late, bench/harness/window.py) ...
    pause_s: float = 3.0
    # ... for at most this long since the last progress: then the run stalled, not ok. Well
    # above Flink's 10 s fetch poll that delays its last commit, and above the 17 s one
    # checkpoint of processor_emit_record took on a machine busy with other runs.
    stall_s: float = 30.0


# ------------------------------------------------------------------------------ input


class InputCorpus:
    """The shared input topic: which line went where, as per-partition prefix sums of words
    (``cumulative[p][k]`` = words in partition p's first k records)."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.cumulative = [array.array("Q", [0]) for _ in range(partitions)]
        self.distinct_words = 0

    @property
    def lines(self) -> int:
        return sum(len(c) - 1 for c in self.cumulative)

    @property
    def words(self) -> int:
        return sum(c[-1] for c in self.cumulative)

    def words_at(self, offsets: dict[int, int]) -> int:
        """Input words before the given offsets (partition -> next offset to read)."""
        total = 0
        for p, offset in offsets.items():
            cum = self.cumulative[p]
            total += cum[max(0, min(offset, len(cum) - 1))]
        return total

    def describe(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "lines": self.lines,
            "words": self.words,
            "distinct_words": self.distinct_words,
            "words_per_line": round(self.words / max(1, self.lines), 3),
        }


def produce_input(
    bootstrap: str, words: int, partitions: int, pool_words: int, seed: int = 2
) -> InputCorpus:
    """``words`` words of lines drawn at random from a pool of ``corpus.lines(pool_words)``
    (seeded), line i into partition i % partitions. Drawing from a pool keeps producing
    hundreds of millions of words to a minute or so; the vocabulary and the line lengths are
    the corpus's."""
    pool_text = list(corpus.lines(pool_words, seed=seed))
    pool = [line.encode() for line in pool_text]
    sizes = [len(words_of(line)) for line in pool_text]
    distinct = {w for line in pool_text for w in words_of(line)}
    del pool_text
    out = InputCorpus(INPUT_TOPIC, partitions)
    out.distinct_words = len(distinct)
    create_topic(bootstrap, INPUT_TOPIC, partitions)
    producer = _producer(bootstrap, linger_ms=20)
    rng = random.Random(seed)
    produced = 0
    for i in itertools.count():
        if produced >= words:
            break
        k = rng.randrange(len(pool))
        p = i % partitions
        produce_waiting(producer, INPUT_TOPIC, pool[k], p)
        cum = out.cumulative[p]
        cum.append(cum[-1] + sizes[k])
        produced += sizes[k]
        if i % 100_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left:
        raise RuntimeError(f"{left} records to {INPUT_TOPIC} not acknowledged")
    return out


# ------------------------------------------------------------------------------ progress


class CommittedProgress(threading.Thread):
    """Every ``interval`` s, the words before the group's committed offsets of the input."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        source: InputCorpus,
        interval: float = 1.0,
        output_topic: str | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"committed-{group}")
        self.group = group
        self.source = source
        self.interval = interval
        self.output_topic = output_topic
        self.samples: list[tuple[float, int]] = []
        # The output topic's end offsets (records and transaction markers), summed.
        self.output_samples: list[tuple[float, int]] = []
        self.error: BaseException | None = None
        self.bootstrap = bootstrap
        self._consumer: Consumer | None = None
        self._offsets: Consumer | None = None  # of the group, never joining it
        self._halt = threading.Event()

    def committed_words(self) -> int:
        parts = [TopicPartition(self.source.topic, p) for p in range(self.source.partitions)]
        # The last committed offsets, not waiting on a pending transactional commit (see
        # clients.committed_offsets: the admin client's request can die of SIGSEGV).
        committed = self._offsets_consumer().committed(parts, timeout=10)
        return self.source.words_at(
            {tp.partition: max(0, tp.offset) for tp in committed if tp.error is None}
        )

    def _offsets_consumer(self) -> Consumer:
        """A consumer of the group that never joins it: it reads the group's offsets."""
        if self._offsets is None:
            self._offsets = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "enable.auto.commit": False,
                    "isolation.level": "read_uncommitted",
                }
            )
        return self._offsets

    def internal_lag(self) -> dict[str, int]:
        """The group's lag on every topic it consumes but the input (a shuffle, a repartition
        topic): end offset minus committed offset, summed, and the end offsets' sum. If that
        lag grows over the window, the input's slope outruns the later stages."""
        # Every partition of the cluster but the input's and the internal ones: those the
        # group never committed come back with no offset (the topics are few in a bench).
        offsets = self._offsets_consumer()
        topics = offsets.list_topics(timeout=10).topics
        candidates = [
            TopicPartition(name, p)
            for name, meta in topics.items()
            if name != self.source.topic and not name.startswith("__")
            for p in meta.partitions
        ]
        parts = [
            tp
            for tp in offsets.committed(candidates, timeout=10)
            if tp.error is None and tp.offset >= 0
        ]
        if self._consumer is None:
            self._consumer = Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": f"{self.group}.bench-lag"}
            )
        lag = ends = 0
        for tp in parts:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10
            )
            lag += max(0, high - tp.offset)
            ends += high
        return {"lag": lag, "end_offsets": ends, "partitions": len(parts)}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None

    def sample(self) -> int:
        words = self.committed_words()
        now = time.time()
        self.samples.append((now, words))
        if self.output_topic is not None:
            self.output_samples.append((now, self.end_offsets(self.output_topic)))
        return words

    def end_offsets(self, topic: str) -> int:
        consumer = self._offsets_consumer()
        total = 0
        for p in range(self.source.partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += max(0, high)
        return total

    def run(self) -> None:
        every(self.interval, self._halt, self.sample, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def latest(self) -> int:
        return self.samples[-1][1] if self.samples else 0


# ------------------------------------------------------------------------------ one run


def list_topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).topics)


def topic_kind(topic: str, output_topic: str) -> str:
    """What a topic a run created is for: the job's output, its shuffle (this project's
    ``<job>.shuffle``, Kafka Streams' and Quix's ``repartition`` topics), a changelog, or
    the engine's own bookkeeping (control, checkpoints, ...)."""
    if topic == output_topic:
        return "output"
    # First: Quix names the changelog of a store behind its repartition topic
    # ``changelog__<group>--repartition__...``, a changelog that mentions "repartition".
    if "changelog" in topic:
        return "changelog"
    if topic.endswith(".shuffle") or "repartition" in topic:
        return "shuffle"
    return "other"


def topic_footprint(broker: LocalBroker, topics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per topic: offsets written (records plus transaction markers: the end offsets) and
    bytes written, from the broker's log directory. Where records were purged (a shuffle or
    repartition topic whose consumed records the engine deletes), the deleted segments are
    gone from the disk: the bytes are then scaled up by end offset / offsets still on disk
    (``bytes_estimated``)."""
    out: dict[str, dict[str, Any]] = {}
    if not topics:
        return out
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-footprint"})
    try:
        meta = consumer.list_topics(timeout=10).topics
        for topic in topics:
            info = meta.get(topic)
            if info is None:
                continue
            offsets = on_disk_offsets = disk = 0
            for p in info.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                offsets += high
                on_disk_offsets += high - low
                directory = broker.data_dir / "data" / f"{topic}-{p}"
                disk += sum(f.stat().st_size for f in directory.glob("*.log"))
            scaled = on_disk_offsets < offsets
            estimate = disk * offsets / on_disk_offsets if scaled and on_disk_offsets else disk
            out[topic] = {
                "offsets": offsets,
                "bytes": round(estimate),
                "bytes_on_disk": disk,
                "bytes_estimated": scaled,
            }
    finally:
        consumer.close()
    return out


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(topics), operation_timeout=30).values():
        # A leftover topic costs disk, not figures.
        with contextlib.suppress(Exception):
            future.result(60)


def steady_run(
    peer: Peer,
    job: Job,
    broker: LocalBroker,
    source: InputCorpus,
    mode: SteadyMode,
    say: Callable[[str], None],
    extra: Callable[[Job, float, float], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One run of ``peer`` on the shared input under a fresh group; returns its figures.
    ``extra(job, window_start, window_end)`` adds system-specific figures (this project's
    checkpoints) before the run's topics are deleted."""
    bootstrap = broker.bootstrap
    before = list_topics(bootstrap)
    if peer.has_output:
        create_topic(bootstrap, job.output_topic, source.partitions)
    broker_pid = int(broker.pid_file.read_text().strip())
    result: dict[str, Any] = {"job": job.name, "interval_ms": job.interval_ms}
    # No reader of the output in the window: reading every record of a system that writes one
    # per word took up to 0.44 of the 2 cores from it. The output's end offsets (records and
    # transaction markers) are sampled instead, and the stages after the input are judged by
    # their lag on the internal topics (``internal_lag``).
    running = peer.start(job)
    sampler = ProcessSampler(running.roots)
    sampler.start()
    output = job.output_topic if peer.has_output else None
    progress = CommittedProgress(bootstrap, peer.group_id(job), source, mode.sample_s, output)
    progress.start()
    total = source.words
    error: str | None = None
    first_at = window_start = window_end = None
    ended_by: str | None = None
    # The broker's CPU, the machine's busy CPU and the harness's own CPU over time: the
    # figures are taken over the span the slope is, which the samples decide afterwards.
    marks = Timeline()
    lag_start: dict[str, int] = {}
    lag_end: dict[str, int] = {}

    def mark() -> None:
        marks.add(time.time(), process_cpu_s(broker_pid), machine_busy_s(), _own_cpu_s())

    try:
        deadline = time.time() + mode.first_progress_timeout_s
        while first_at is None:
            if not running.alive():
                raise RuntimeError("exited before committing any input")
            if time.time() > deadline:
                raise TimeoutError(
                    f"no committed input progress within {mode.first_progress_timeout_s:.0f} s"
                )
            mark()
            time.sleep(0.2)
            positive = [t for t, w in progress.samples if w > 0]
            first_at = positive[0] if positive else None
        planned_start = first_at + mode.warmup_s
        planned_end = planned_start + mode.window_s
        while ended_by is None:
            now = time.time()
            mark()
            if window_start is None and now >= planned_start:
                window_start = now
                lag_start = progress.internal_lag()
            samples = [(t, float(w)) for t, w in progress.samples]
            ended_by = window_over(now, planned_end, samples, total, mode.pause_s, mode.stall_s)
            if ended_by is None and not running.alive():
                raise RuntimeError(f"exited during the run: {running.exit_codes()}")
            if ended_by is None:
                time.sleep(0.2)
        window_end = time.time()
        mark()
        if window_end > planned_end + 1.0:  # flat progress at the planned end, waited out
            result["window_extended_s"] = round(window_end - planned_end, 1)
        lag_end = progress.internal_lag()
        if window_start is None:  # the input ran out during the warm-up
            window_start = first_at
            result["warmup_cut_short"] = True
        if ended_by == "stalled":
            latest = progress.latest()
            error = (
                f"stalled: no committed input progress for {mode.stall_s:.0f} s at "
                f"{latest:,} of {total:,} words ({100 * latest / total:.1f} %)"
            )
            result["stalled"] = stall_summary(progress.samples, sampler, window_end)
    except (TimeoutError, RuntimeError) as exc:
        error = str(exc)
    finally:
        killed = running.stop()
        sampler.stop()
        progress.stop()
    with_final = progress.committed_words()
    progress.close()
    result["exit_codes"] = running.exit_codes()
    result["killed_at_stop"] = len(killed)
    result["input_words_committed_at_stop"] = with_final
    result["ok"] = error is None
    result["error"] = error
    if error is None and first_at is not None and window_start is not None and window_end:
        span = measured_span(
            [(t, float(w)) for t, w in progress.samples],
            total,
            (window_start, window_end),
            first_at,
            mode.pause_s,
            lambda a, b: (sampler.cpu_at(b) - sampler.cpu_at(a)) / (b - a) < IDLE_CORES,
        )
        result.update(span_flags(span, window_start, window_end, result))
        inside = span.samples
        rate = slope(inside)
        if rate is None or len(inside) < 3:
            result["ok"] = False
            result["error"] = f"only {len(inside)} samples in the window"
        else:
            # A backlog's figure: the input's slope. Whether the later stages kept pace with
            # it is ``internal_lag`` (a starved second stage of a backlog is not the system's
            # balanced capacity: bench/capacity.py measures that, live).
            begin, finish = inside[0][0], inside[-1][0]
            seen = [(t, float(o)) for t, o in progress.output_samples if begin <= t <= finish]
            output_rate = (slope(seen) if len(seen) >= 3 else 0.0) if output else None
            words_in_window = inside[-1][1] - inside[0][1]
            cpu = sampler.cpu_at(finish) - sampler.cpu_at(begin)
            seconds = finish - begin
            (broker0, machine0, bench0), (broker1, machine1, bench1) = (
                marks.at(begin),
                marks.at(finish),
            )
            broker_cpu, machine, bench_cpu = broker1 - broker0, machine1 - machine0, bench1 - bench0
            per_m = words_in_window / 1e6
            result.update(
                {
                    "words_per_s": round(rate),
                    "input_words_per_s": round(rate),
                    "output_offsets_per_s": None if output_rate is None else round(output_rate),
                    "window_s": round(seconds, 1),
                    "window_samples": len(inside),
                    "window_starts_after_first_commit_s": round(begin - first_at, 1),
                    "words_in_window": int(words_in_window),
                    "cpu_s_per_million_words": round(cpu / per_m, 3) if per_m else None,
                    "cpu_cores_used": round(cpu / seconds, 2),
                    "broker_cpu_s_per_million_words": round(broker_cpu / per_m, 3)
                    if per_m
                    else None,
                    "machine_busy_pct": round(100 * machine / (cores() * seconds), 1),
                    "other_cpu_cores": round((machine - cpu - broker_cpu) / seconds, 2),
                    "internal_lag": keeps_up(lag_start, lag_end),
                    # The offset sampler runs in the bench's process, on the same cores.
                    "bench_cpu_cores": round(bench_cpu / seconds, 2),
                    "bench_cpu_share": round(bench_cpu / (cores() * seconds), 4),
                }
            )
            if extra is not None:
                try:
                    result.update(extra(job, begin, finish))
                except Exception as exc:  # noqa: BLE001 - an extra figure, not the run
                    result["extra_error"] = repr(exc)
    result["resources"] = sampler.report()
    result["samples"] = [(round(t - (first_at or t), 2), w) for t, w in progress.samples]
    created = sorted(list_topics(bootstrap) - before)
    footprint = topic_footprint(broker, created)
    result["topics"] = footprint
    result["work"] = work_summary(footprint, job.output_topic, with_final)
    delete_topics(bootstrap, created)
    if result["ok"]:
        notes = "; ".join(drain_notes(result))
        say(
            f"{job.name}: {result['words_per_s']:,} words/s (output "
            f"{result['output_offsets_per_s']} offsets/s) over {result['window_s']} s, "
            f"{result['cpu_s_per_million_words']} CPU s/M words, machine "
            f"{result['machine_busy_pct']} % busy{f' ({notes})' if notes else ''}"
        )
    else:
        say(f"{job.name}: FAILED: {result['error']}; logs in {job.workdir}")
    return result


def span_flags(
    span: Span, window_start: float, window_end: float, before: dict[str, Any]
) -> dict[str, Any]:
    """How a run's span was chosen, for its result: whether the input ran out, whether the
    warm-up was cut short (too few samples in the window, or ``before`` says the input ran
    out in the warm-up), how long the window was waited for, and a plateau before the end of
    the input (a late final commit when the system was idle over it)."""
    out: dict[str, Any] = {
        "input_exhausted": span.exhausted,
        "warmup_cut_short": span.warmup_cut_short or bool(before.get("warmup_cut_short")),
        "window_waited_s": round(window_end - window_start, 1),
    }
    if span.plateau is not None:
        begin, end = span.plateau
        out["final_plateau"] = {
            "s": round(end - begin, 1),
            "idle": span.plateau_idle,
            # Idle: the input had run out before; the commit of its end came this late.
            "excluded": bool(span.plateau_idle),
        }
    return out


def drain_notes(result: dict[str, Any]) -> list[str]:
    """How a run's input ran out, if it did: for its progress line and the report."""
    notes = []
    if result.get("input_exhausted"):
        notes.append("input exhausted")
    if result.get("warmup_cut_short"):
        notes.append("measured from the first commit")
    plateau = result.get("final_plateau")
    if plateau:
        kind = "idle, left out" if plateau["excluded"] else "busy, kept"
        notes.append(f"final commit {plateau['s']} s late ({kind})")
    if result.get("window_extended_s"):
        notes.append(
            f"window extended {result['window_extended_s']} s (committed progress flat at its end)"
        )
    return notes


def stall_summary(
    samples: Sequence[tuple[float, int]], sampler: ProcessSampler, now: float
) -> dict[str, Any]:
    """A stalled run: where its committed words stopped, since when, and how busy the system
    was since (idle: waiting on something; busy: working without committing)."""
    since = now - flat_for([(t, float(w)) for t, w in samples], now)
    seconds = max(now - since, 1e-9)
    return {
        "at_words": samples[-1][1] if samples else 0,
        "flat_s": round(now - since, 1),
        "cpu_cores": round((sampler.cpu_at(now) - sampler.cpu_at(since)) / seconds, 2),
    }


def keeps_up(start: dict[str, int], end: dict[str, int]) -> dict[str, Any]:
    """Whether the stages after the input kept pace in the window: their lag (records behind
    on the shuffle / repartition topics) grew by at most 10 % of what was written to those
    topics in the window (a few commits' worth of slack). No internal topic (the ceiling, or
    an engine whose shuffle is not a topic): nothing to judge."""
    if not start or not end or not end.get("partitions"):
        return {"judged": False}
    written = end["end_offsets"] - start["end_offsets"]
    growth = end["lag"] - start["lag"]
    return {
        "judged": True,
        "lag_start": start["lag"],
        "lag_end": end["lag"],
        "written_in_window": written,
        "kept_up": growth <= 0.1 * max(written, 1),
    }


def work_summary(
    footprint: dict[str, dict[str, Any]], output_topic: str, input_words: int
) -> dict[str, Any]:
    """What a run wrote, per kind of topic, in all and per million input words consumed."""
    kinds: dict[str, dict[str, float]] = {}
    for topic, f in footprint.items():
        k = kinds.setdefault(topic_kind(topic, output_topic), {"offsets": 0, "bytes": 0})
        k["offsets"] += f["offsets"]
        k["bytes"] += f["bytes"]
    per_m = input_words / 1e6 if input_words else 0
    out: dict[str, Any] = {"input_words": input_words}
    for kind in ("shuffle", "output", "changelog", "other"):
        k = kinds.get(kind, {"offsets": 0, "bytes": 0})
        out[f"{kind}_offsets"] = int(k["offsets"])
        out[f"{kind}_bytes"] = int(k["bytes"])
        out[f"{kind}_offsets_per_m_words"] = round(k["offsets"] / per_m) if per_m else None
        out[f"{kind}_bytes_per_m_words"] = round(k["bytes"] / per_m) if per_m else None
    written = sum(k["bytes"] for k in kinds.values())
    out["bytes_written"] = int(written)
    out["bytes_written_per_m_words"] = round(written / per_m) if per_m else None
    return out


# ------------------------------------------------------------------------------ perf test


def tools_classpath(broker: LocalBroker) -> str:
    # kafka-consumer-perf-test lives in kafka-tools, which the broker's jars do not include:
    # the same checked set as processor's own tools (it once had a pom of its own for the
    # same home, and each of the two refetched over the other's jars).
    return str(tools_libs(broker.cache_dir) / "*")


def consumer_perf_test(
    broker: LocalBroker,
    source: InputCorpus,
    group: str,
    classpath: str,
    java: str = "java",
    max_records: int = 10_000_000,
) -> dict[str, Any]:
    """kafka-consumer-perf-test (``ConsumerPerformance``, one Java consumer, all partitions,
    read_committed) over the input topic's first ``max_records`` records: records/s, and
    words/s at the topic's words per line."""
    cmd = [
        java,
        "-cp",
        classpath,
        PERF_CLASS,
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        source.topic,
        "--num-records",
        str(min(source.lines, max_records)),
        "--group",
        group,
        "--timeout",
        "30000",
        "--command-property",
        "isolation.level=read_committed",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    result: dict[str, Any] = {"command": " ".join(cmd[:1] + cmd[3:])}
    header = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if done.returncode != 0 or header is None or header + 1 >= len(lines):
        result["ok"] = False
        result["error"] = (done.stdout + done.stderr).strip()[-600:]
        return result
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    records_per_s = float(row["fetch.nMsg.sec"])
    per_line = source.words / max(1, source.lines)
    result.update(
        {
            "ok": True,
            "records": int(float(row["data.consumed.in.nMsg"])),
            "mb_per_s": float(row["fetch.MB.sec"]),
            "records_per_s": round(records_per_s),
            "records_per_s_incl_rebalance": round(float(row["nMsg.sec"])),
            "words_per_s": round(records_per_s * per_line),
            "raw": row,
        }
    )
    return result


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median and range of a series of runs."""
    if not values:
        return {"median": None, "range": None, "n": 0}
    return {
        "median": round(statistics.median(values)),
        "range": [round(min(values)), round(max(values))],
        "n": len(values),
    }
