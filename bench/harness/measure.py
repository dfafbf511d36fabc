"""What bench/run.py measures, independent of the system under test.

* ``ProcessSampler``: CPU seconds and peak RSS of process trees, from /proc.
* ``OutputWatcher``: reads an output topic with read_committed while the system runs, notes
  the moment every count is exact and checks the exactly-once invariants.
* ``produce_all`` / ``RateProducer``: the input, as a backlog or at a fixed rate.
* ``latency_percentiles``: end-to-end latency of each input line from the output's visibility.
"""

from __future__ import annotations

import array
import bisect
import collections
import contextlib
import itertools
import json
import math
import multiprocessing
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.kafka.clients import produce_waiting

_WORD = re.compile(r"\w+")
_TICK = os.sysconf("SC_CLK_TCK")


def words_of(line: str) -> list[str]:
    """The oracle's tokenizer: exactly ``re.findall(r"\\w+", line.lower())``."""
    return _WORD.findall(line.lower())


def exact_counts(lines: Iterable[str]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        counts.update(words_of(line))
    return counts


# ------------------------------------------------------------------------------ topics


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = admin.list_topics(topic, timeout=10).topics.get(topic)
        if info is not None and info.error is None and len(info.partitions) == partitions:
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} not visible after creation")


# The rate producer's linger (see _produce_at_rate); bench/experiments/producer_load.py
# compares others.
LINGER_MS = int(os.environ.get("BENCH_PRODUCER_LINGER_MS", "5"))


def _producer(bootstrap: str, linger_ms: int) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": linger_ms,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def produce_all(bootstrap: str, topic: str, lines: Sequence[bytes], partitions: int) -> None:
    """The whole corpus, line i into partition i % partitions: every system gets the same
    partitions in the same order."""
    producer = _producer(bootstrap, linger_ms=20)
    for i, line in enumerate(lines):
        produce_waiting(producer, topic, line, i % partitions)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records to {topic} not acknowledged")


class RateProducer:
    """Lines at a fixed rate in words per second, from a process of its own; remembers when
    each line was sent.

    A process rather than a thread: in the bench's process it shared the GIL with the output
    watcher, and above a few hundred thousand words/s the two slowed each other, so the rate
    fell short of the target for reasons that had nothing to do with the system under test.
    It still shares the machine's cores with the system (the result's ``producer_max_behind_s``
    says when it could not keep the rate). The lines travel through a file and the send times
    come back as float64s through another; ``start``/``join`` as with a thread.
    """

    def __init__(
        self, bootstrap: str, topic: str, lines: Sequence[str], words_per_s: float, partitions: int
    ) -> None:
        self.sent_at: list[float] = []
        self.max_behind_s = 0.0
        self.error: BaseException | None = None
        self._lines = lines
        self._args = (bootstrap, topic, words_per_s, partitions)

    def start(self) -> None:
        # The directory exists from here to join(), which removes it.
        self._dir = Path(tempfile.mkdtemp(prefix="rate-producer-"))
        with (self._dir / "lines").open("w", encoding="utf-8") as handle:
            for line in self._lines:
                handle.write(f"{len(words_of(line))}\t{line}\n")
        bootstrap, topic, words_per_s, partitions = self._args
        context = multiprocessing.get_context("spawn")  # no fork of librdkafka's threads
        self._process = context.Process(
            target=_produce_at_rate,
            args=(bootstrap, topic, str(self._dir), words_per_s, partitions),
            name=f"rate-producer-{topic}",
            daemon=True,
        )
        self._process.start()

    def join(self, timeout: float | None = None) -> None:
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
            self.error = TimeoutError(f"the rate producer did not finish in {timeout}s")
        try:
            sent = array.array("d")
            raw = (self._dir / "sent_at").read_bytes()
            sent.frombytes(raw[: len(raw) - len(raw) % sent.itemsize])
            self.sent_at = sent.tolist()
            status = json.loads((self._dir / "status.json").read_text())
            self.max_behind_s = float(status["max_behind_s"])
            if status.get("error") and self.error is None:
                self.error = RuntimeError(status["error"])
        except (OSError, ValueError, KeyError) as exc:
            if self.error is None:
                self.error = RuntimeError(
                    f"the rate producer left no results (exit {self._process.exitcode}): {exc}"
                )
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def _produce_at_rate(
    bootstrap: str, topic: str, workdir: str, words_per_s: float, partitions: int
) -> None:
    """RateProducer's process: line i into partition i % partitions when the words before it
    are due. It sleeps only when 2 ms or more ahead, so that lines go out in small bursts
    rather than one sleep per line (a sleep costs more than a line at high rates).

    ``linger.ms`` is 5, not 1: at 300,000 words/s a 1 ms linger made the broker spend 0.54-0.76
    of the machine's 2 cores on produce requests (0.24-0.26 at 5 ms;
    bench/experiments/producer_load.py, no system running), CPU every system under test then
    lacked. The up to 5 ms more each line waits in the producer counts in every system's latency
    alike."""
    directory = Path(workdir)
    counts: list[int] = []
    values: list[bytes] = []
    with (directory / "lines").open("rb") as handle:
        for raw in handle:
            count, _, line = raw.rstrip(b"\n").partition(b"\t")
            counts.append(int(count))
            values.append(line)
    sent = array.array("d")
    status: dict[str, object] = {"max_behind_s": 0.0}
    producer = _producer(bootstrap, linger_ms=LINGER_MS)
    behind = 0.0
    clock = time.time
    try:
        start = clock()
        words = 0
        for i, value in enumerate(values):
            due = start + words / words_per_s
            now = clock()
            if due - now > 0.002:
                time.sleep(due - now)
                now = clock()
            elif now - due > behind:
                behind = now - due
            sent.append(now)
            produce_waiting(producer, topic, value, i % partitions)
            if i % 64 == 0:
                producer.poll(0)
            words += counts[i]
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} records to {topic} not acknowledged")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, not lost
        status["error"] = repr(exc)
    status["max_behind_s"] = behind
    (directory / "sent_at").write_bytes(sent.tobytes())
    (directory / "status.json").write_text(json.dumps(status))


def rates(progress: Sequence[tuple[float, int]], t0: float) -> list[tuple[float, float]]:
    """(seconds since ``t0`` at the end of a sample interval, words/s within it) from a
    watcher's ``progress``."""
    out = []
    for (ta, wa), (tb, wb) in itertools.pairwise(progress):
        if tb > ta:
            out.append((round(tb - t0, 3), round((wb - wa) / (tb - ta), 1)))
    return out


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (nearest rank) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def slope(samples: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over t; None with fewer than two distinct times."""
    if len(samples) < 2:
        return None
    ts = [t for t, _ in samples]
    ys = [y for _, y in samples]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var


def latency_percentiles(
    lines: Sequence[str],
    sent_at: Sequence[float],
    seen: dict[str, tuple[list[int], list[float]]],
    skip_before: float,
) -> dict[str, Any]:
    """Latency of a line: until every word of it shows a count that includes it.

    For word w, the k-th occurrence in the input is included once the output shows a count
    >= k for w; the time is when the watcher first saw such a record (read_committed, so
    only after the transaction that carries it committed). The line's latency is the maximum
    over its words minus the time it was handed to the producer. Lines sent before
    ``skip_before`` (warm-up) still count towards the occurrence numbers but not the figures.
    """
    occurrences: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    measured_at: list[float] = []
    missing = 0
    for line, sent in zip(lines, sent_at, strict=False):
        needed: dict[str, int] = {}
        for word in words_of(line):
            occurrences[word] += 1
            needed[word] = occurrences[word]
        if sent < skip_before or not needed:
            continue
        visible = 0.0
        for word, k in needed.items():
            values, times = seen.get(word, ([], []))
            i = bisect.bisect_left(values, k)
            if i == len(values):
                missing += 1
                visible = float("nan")
                break
            visible = max(visible, times[i])
        if visible == visible:  # not NaN
            latencies.append(visible - sent)
            measured_at.append(sent)
    # In the order sent: a system that falls behind shows latencies that grow over the run.
    growth = slope(list(zip(measured_at, latencies, strict=True)))
    quarters = [
        latencies[len(latencies) * q // 4 : len(latencies) * (q + 1) // 4] for q in range(4)
    ]
    latencies.sort()
    if not latencies:
        return {"lines": 0, "missing": missing}

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000, 1)

    return {
        "lines": len(latencies),
        "missing": missing,
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": round(latencies[-1] * 1000, 1),
        # Seconds of latency gained per second of the run: about (rate - capacity) / capacity
        # for a system that falls behind, about 0 for one that keeps up.
        "latency_growth": None if growth is None else round(growth, 4),
        "p50_ms_by_quarter": [
            round(statistics.median(q) * 1000, 1) if q else None for q in quarters
        ],
    }


# ------------------------------------------------------------------------------ output


@dataclass
class Verdict:
    """The exactly-once invariants on everything committed to the output topic."""

    records: int = 0
    words: int = 0
    wrong_final: int = 0
    missing_words: int = 0
    unknown_words: int = 0
    not_increasing: int = 0  # updates of a word that were not above its previous value
    examples: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.wrong_final or self.missing_words or self.unknown_words)


class OutputWatcher(threading.Thread):
    """Tails ``topic`` with read_committed from the beginning while the system runs.

    ``exact_at`` is the wall time at which the committed output first held the exact count of
    every word (``expected``): the read is polled continuously, so it is at most one poll
    (tens of milliseconds) after the commit became visible.

    ``progress`` is the committed output over time: every ``sample_s`` a pair (wall time,
    words committed so far), where a record (word, count) adds ``count`` minus the word's
    previous count. It is the same for every system whatever it emits per word (every update,
    or one per commit), so its slope is the words/s of committed output.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        expected: dict[str, int],
        record_times: bool = False,
        sample_s: float = 0.5,
        time_prefix: str = "",
    ) -> None:
        super().__init__(daemon=True, name=f"watcher-{topic}")
        self.topic = topic
        self.expected = expected
        self.record_times = record_times
        # With record_times, only the words that start with it (the latency probes).
        self.time_prefix = time_prefix
        self.current: dict[str, int] = {}
        self.seen: dict[str, tuple[list[int], list[float]]] = {}
        self.records = 0
        self.not_increasing = 0
        self.unknown = 0
        self.examples: list[str] = []
        self.first_output_at: float | None = None
        self.exact_at: float | None = None
        self.error: BaseException | None = None
        self.committed_words = 0
        self.progress: list[tuple[float, int]] = []
        self.sample_s = sample_s
        self._matched = 0
        self._halt = threading.Event()
        self._exact = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-watcher-{topic}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
            }
        )
        self._partitions = 0
        self._closed = False

    def close(self) -> None:
        """Stop reading without judging (an error path); idempotent."""
        self._halt.set()
        self.join(30)
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - wait_exact reports it
            self.error = exc
            self._exact.set()

    def _run(self) -> None:
        meta = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        self._partitions = len(meta.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self._partitions)])
        next_sample = time.time()
        while not self._halt.is_set():
            self._poll(0.05)
            now = time.time()
            if now >= next_sample:
                self.progress.append((round(now, 3), self.committed_words))
                while next_sample <= now:
                    next_sample += self.sample_s

    def _poll(self, timeout: float) -> int:
        msgs = self._consumer.consume(10_000, timeout)
        if not msgs:
            return 0
        now = time.time()
        expected, current = self.expected, self.current
        for msg in msgs:
            if msg.error() is not None:
                raise KafkaException(msg.error())
            raw_key, raw_value = msg.key(), msg.value()
            word = raw_key.decode() if raw_key is not None else ""
            value = int(raw_value) if raw_value is not None else -1
            previous = current.get(word)
            want = expected.get(word)
            if want is None:
                self.unknown += 1
                self._example(f"unknown word {word!r} = {value}")
            else:
                self._matched += (value == want) - (previous == want)
            self.committed_words += value - (previous or 0)
            if previous is not None and value <= previous:
                self.not_increasing += 1
                self._example(f"{word!r}: {value} after {previous}")
            current[word] = value
            if self.record_times and word.startswith(self.time_prefix):
                values, times = self.seen.setdefault(word, ([], []))
                if not values or value > values[-1]:
                    values.append(value)
                    times.append(now)
        self.records += len(msgs)
        if self.first_output_at is None:
            self.first_output_at = now
        if self.exact_at is None and self._matched == len(expected) and not self.unknown:
            self.exact_at = now
            self._exact.set()
        return len(msgs)

    def _example(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)

    def wait_exact(self, timeout: float, alive: object = None) -> float:
        """Until the committed output is exact; ``alive()`` False (the system died) ends the
        wait early. Returns ``exact_at``; raises TimeoutError with what is still off."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._exact.wait(0.2):
                break
            if alive is not None and not alive():  # type: ignore[operator]
                # Let the last commits arrive before judging.
                self._exact.wait(3)
                break
        if self.error is not None:
            raise RuntimeError(f"reading {self.topic} failed: {self.error}")
        if self.exact_at is None:
            off = sum(1 for w, n in self.expected.items() if self.current.get(w) != n)
            raise TimeoutError(
                f"{self.topic}: {off} of {len(self.expected)} words not at their exact count "
                f"({self.records} records read)"
            )
        return self.exact_at

    def finish(self, timeout: float = 120) -> Verdict:
        """After the system stopped: read to the end of every partition, then judge it all.

        ``timeout``: how long the read may go without a record before a partition that has
        not reached its end fails it (an open transaction holds read_committed back). Not a
        limit on the whole read: a peer that writes one record per word leaves 100 M records
        after a capacity ladder, some 4 minutes of reading here."""
        self._halt.set()
        self.join(30)
        if self.error is not None:
            raise RuntimeError(f"reading {self.topic} failed: {self.error}")
        consumer = self._consumer
        try:
            ends = {}
            for p in range(self._partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
                ends[p] = high
            deadline = time.monotonic() + timeout
            while ends and time.monotonic() < deadline:
                if self._poll(0.2):
                    deadline = time.monotonic() + timeout
                for tp in consumer.position([TopicPartition(self.topic, p) for p in ends]):
                    # read_committed stops at the last stable offset: an open transaction
                    # would keep a partition from its end.
                    if tp.offset >= ends[tp.partition]:
                        del ends[tp.partition]
            if ends:
                raise TimeoutError(
                    f"{self.topic}: partitions {sorted(ends)} short of their end, no record "
                    f"for {timeout:.0f} s"
                )
        finally:
            self._closed = True
            consumer.close()
        verdict = Verdict(
            records=self.records,
            words=len(self.current),
            unknown_words=len(self.current.keys() - self.expected.keys()),
            missing_words=len(self.expected.keys() - self.current.keys()),
            not_increasing=self.not_increasing,
            examples=list(self.examples),
        )
        for word, want in self.expected.items():
            got = self.current.get(word)
            if got is not None and got != want:
                verdict.wrong_final += 1
                if len(verdict.examples) < 5:
                    verdict.examples.append(f"{word!r}: final {got} != exact {want}")
        return verdict


# ------------------------------------------------------------------------------ processes


@dataclass
class _Seen:
    label: str
    hwm_kb: int = 0
    cpu_s: float = 0.0  # own + reaped children, as last sampled


class ProcessSampler(threading.Thread):
    """CPU seconds and peak RSS of the process trees under ``roots``, sampled from /proc.

    CPU of the tree = the sum over its live processes of utime + stime + cutime + cstime (a
    child that exits and is reaped by a parent in the tree moves into the parent's cutime),
    so the figure is exact while the tree lives; after the root exited, its last sample
    stands (at most ``interval`` of CPU missing). Peak RSS: VmHWM (the kernel's high-water
    mark of the resident set) of each process, and the largest sampled sum of VmRSS.
    """

    def __init__(self, roots: Sequence[int], interval: float = 0.25) -> None:
        super().__init__(daemon=True, name="process-sampler")
        self.roots = list(roots)
        self.interval = interval
        self.processes: dict[int, _Seen] = {}
        self.cpu_s = 0.0
        self.timeline: list[tuple[float, float]] = []  # (wall time, tree CPU seconds)
        self.peak_rss_sum_kb = 0
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        self.sample()

    def sample(self) -> float:
        """Take one sample now; returns the tree's CPU seconds so far."""
        with self._lock:
            tree = _tree(self.roots)
            total = 0.0
            rss_sum = 0
            for pid in tree:
                stat = _stat(pid)
                status = _status(pid)
                if stat is None or status is None:
                    continue
                seen = self.processes.get(pid)
                if seen is None:
                    seen = self.processes[pid] = _Seen(_label(pid))
                seen.cpu_s = stat
                seen.hwm_kb = max(seen.hwm_kb, status[0])
                total += stat
                rss_sum += status[1]
            if tree:
                self.cpu_s = max(self.cpu_s, total)
                self.timeline.append((time.time(), self.cpu_s))
            self.peak_rss_sum_kb = max(self.peak_rss_sum_kb, rss_sum)
            return self.cpu_s

    def cpu_at(self, when: float) -> float:
        """Tree CPU seconds at wall time ``when``, interpolated between samples."""
        with self._lock:
            points = list(self.timeline)
        if not points or when <= points[0][0]:
            return 0.0  # before the first sample (taken right after the start)
        for (t0, c0), (t1, c1) in itertools.pairwise(points):
            if t0 <= when <= t1:
                return c0 + (c1 - c0) * (when - t0) / (t1 - t0 or 1)
        return points[-1][1]

    def report(self) -> dict[str, object]:
        with self._lock:
            by_process = {
                f"{seen.label} [{pid}]": round(seen.hwm_kb / 1024, 1)
                for pid, seen in sorted(self.processes.items())
            }
            return {
                "cpu_s": round(self.cpu_s, 2),
                "peak_rss_mb_sum_of_process_peaks": round(
                    sum(s.hwm_kb for s in self.processes.values()) / 1024, 1
                ),
                "peak_rss_mb_simultaneous": round(self.peak_rss_sum_kb / 1024, 1),
                "peak_rss_mb_by_process": by_process,
            }


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(text[text.rindex(")") + 2 :].split()[1])
    return parents


def _tree(roots: Sequence[int]) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    parents = _parents()
    for pid, ppid in parents.items():
        children[ppid].append(pid)
    out: list[int] = []
    todo = [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _stat(pid: int) -> float | None:
    """utime + stime + cutime + cstime in seconds."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime..cstime are fields 14..17.
    if fields[0] == "Z":
        return None
    return sum(int(f) for f in fields[11:15]) / _TICK


def _status(pid: int) -> tuple[int, int] | None:
    """(VmHWM, VmRSS) in kB."""
    hwm = rss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    except OSError:
        return None
    return hwm, rss


def _label(pid: int) -> str:
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        args = [a.decode(errors="replace") for a in argv]
        if args and args[0].endswith("java"):
            return "java " + next((a for a in args[1:] if a.endswith(".jar")), "").split("/")[-1]
        if len(args) > 1 and args[1] == "-m":
            return " ".join(args[2:5])
        return " ".join([args[0].split("/")[-1], *(a.split("/")[-1] for a in args[1:3])])
    return "?"


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat: all but idle, iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK


def log_anomalies(text: str, limit: int = 4) -> dict[str, object]:
    """Warning and error lines of a log: how many, and a few distinct ones (shortened)."""
    hits = [
        line for line in text.splitlines() if re.search(r"\b(WARN|WARNING|ERROR|Exception)\b", line)
    ]
    distinct: dict[str, None] = {}
    for line in hits:
        # Without timestamps and numbers, repeats of one message fold into one example.
        key = re.sub(r"\d+", "N", line.split("] ", 1)[-1])[:240]
        distinct.setdefault(key, None)
    return {"lines": len(hits), "examples": list(distinct)[:limit]}


def process_cpu_s(pid: int) -> float:
    """utime + stime (+ reaped children) of one process, 0 when it is gone."""
    return _stat(pid) or 0.0


def pgroup_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out
