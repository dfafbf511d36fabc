"""Transaction anomalies in a job's output, read from the brokers' own log files.

The chaos and EOS verifiers check values: no loss, no duplicate. This checks the
transactions under them, the way Jepsen's 2024 Kafka analysis names their anomalies, with
evidence that does not come from the consumer being checked:

- **aborted read**: a record a read_committed consumer returns, though the transaction that
  wrote it ended in an ABORT marker (or in none) in that partition's log;
- **hidden commit**: a record of a committed transaction that read_committed never returns;
- **torn transaction**: a transaction whose marker in some partition disagrees with the
  decision its coordinator logged (PrepareCommit/PrepareAbort in ``__transaction_state``),
  or data no logged decision accounts for: its output would be visible in part;
- **open transaction**: a transactional id of the job whose last logged state is
  Ongoing, PrepareCommit or PrepareAbort once the job is done.

Not an anomaly of the job, but counted (``unmarked``): a transaction whose coordinator
logged a decision and wrote no marker at all (on a single broker's graceful restart it can
complete a commit while the partitions have no leader), so that its data stays open until
the task's next incarnation aborts it (``TransactionalOutput.abort_leftovers``). In the log
that data is followed by the next producer epoch's data before any marker, and the abort's
marker closes both. It is torn only if another partition of the same decision shows it
committed.

Kafka's own ``kafka-dump-log`` (``DumpLogSegments``, fetched by processor/localkafka/tools.py)
reads the segment files of each partition's current leader: the batches with their producer
ids and timestamps, the COMMIT/ABORT markers, and the coordinator's transaction log.

Linking a partition's data to its transaction: a producer's transactions are serial, and
every record of transaction k is produced after k-1 was decided and before k is (one clock:
every process runs on this machine). So, in each partition and per producer, each run of
data batches up to the producer's next marker is the first logged decision of that producer
that names the partition and comes no earlier than the data's newest timestamp.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.kafka import clients
from processor.localkafka.broker import LocalBroker
from processor.localkafka.brokertools import find_java
from processor.localkafka.tools import tools_libs

TopicPart = tuple[str, int]
DUMP = "org.apache.kafka.tools.DumpLogSegments"
TXN_LOG = "__transaction_state"
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
DECISIONS = {"PrepareCommit": "COMMIT", "PrepareAbort": "ABORT"}

_BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) .*? producerId: (-?\d+) producerEpoch: (-?\d+) "
    r".*? isTransactional: (\w+) isControl: (\w+) .*? CreateTime: (-?\d+)"
)
_MARKER = re.compile(r"endTxnMarker: (COMMIT|ABORT)")
_TXN_RECORD = re.compile(r"key: (\{.*\}) payload: (\{.*\})\s*$")


@dataclass
class Batch:
    base: int
    last: int
    producer: int
    transactional: bool
    control: bool
    max_ms: int
    marker: str | None = None  # a control batch's COMMIT or ABORT
    epoch: int = 0


@dataclass(frozen=True)
class Decision:
    """A transaction's end as its coordinator logged it."""

    txn_id: str
    producer: int
    outcome: str  # COMMIT or ABORT
    partitions: frozenset[TopicPart]
    at_ms: int


@dataclass
class TxnLog:
    decisions: dict[int, list[Decision]] = field(default_factory=lambda: defaultdict(list))
    last_state: dict[str, str] = field(default_factory=dict)  # transactional id -> status


@dataclass
class Anomalies:
    records: int = 0  # data records of the checked partitions, read from their logs
    transactions: int = 0  # data-bearing (partition, transaction) runs attributed
    aborted_reads: int = 0
    hidden_commits: int = 0
    torn: int = 0
    unmarked: int = 0  # runs of a decision that got no marker, closed by a later abort
    open_transactions: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # the first few, for the report

    @property
    def clean(self) -> bool:
        return not (
            self.aborted_reads or self.hidden_commits or self.torn or self.open_transactions
        )

    def to_json(self) -> dict[str, object]:
        return {
            "records": self.records,
            "transactions": self.transactions,
            "aborted_reads": self.aborted_reads,
            "hidden_commits": self.hidden_commits,
            "torn": self.torn,
            "unmarked": self.unmarked,
            "open_transactions": len(self.open_transactions),
            **({"examples": self.examples[:5]} if self.examples else {}),
        }

    def note(self, what: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(what)


# --------------------------------------------------------------------- parsing


def parse_segments(lines: Iterable[str]) -> dict[TopicPart, list[Batch]]:
    """The batches of each partition from ``DumpLogSegments --deep-iteration`` output
    over ``.log`` files (a partition's segments in offset order)."""
    out: dict[TopicPart, list[Batch]] = defaultdict(list)
    current: list[Batch] | None = None
    batch: Batch | None = None
    dumped: set[Path] = set()
    for line in lines:
        if line.startswith("Dumping "):
            path = Path(line[len("Dumping ") :].strip())
            topic, _, part = path.parent.name.rpartition("-")
            # A segment dumped twice would read as a producer's transactions repeated.
            fresh = path.suffix == ".log" and path not in dumped
            dumped.add(path)
            current = out[topic, int(part)] if fresh else None
            batch = None
        elif current is None:
            continue
        elif line.startswith("baseOffset: "):
            m = _BATCH.match(line)
            if m is None:
                raise ValueError(f"unexpected batch line: {line[:200]}")
            base, last, producer, epoch, txn, control, max_ms = m.groups()
            batch = Batch(
                int(base),
                int(last),
                int(producer),
                txn == "true",
                control == "true",
                int(max_ms),
                epoch=int(epoch),
            )
            current.append(batch)
        elif batch is not None and batch.control and "endTxnMarker" in line:
            marker = _MARKER.search(line)
            batch.marker = marker.group(1) if marker else None
    return dict(out)


def parse_txn_log(lines: Iterable[str]) -> TxnLog:
    """Decisions per producer id, and each transactional id's last state, from
    ``DumpLogSegments --transaction-log-decoder`` over ``__transaction_state``'s segments."""
    log = TxnLog()
    for line in lines:
        m = _TXN_RECORD.search(line)
        if m is None:
            continue
        try:
            key, value = json.loads(m.group(1)), json.loads(m.group(2))
            txn_id = str(key["data"]["transactionalId"])
            data = value["data"]
            status = str(data["transactionStatus"])
        except (ValueError, KeyError, TypeError):
            continue  # a tombstone or another record type: no state of a transaction
        log.last_state[txn_id] = status
        outcome = DECISIONS.get(status)
        if outcome is None:
            continue
        parts = frozenset(
            (str(entry["topic"]), int(p))
            for entry in data.get("transactionPartitions") or []
            for p in entry["partitionIds"]
        )
        decision = Decision(
            txn_id,
            int(data["producerId"]),
            outcome,
            parts,
            int(data["transactionLastUpdateTimestampMs"]),
        )
        same = log.decisions[decision.producer]
        if not same or same[-1] != decision:  # a coordinator may log a decision twice
            same.append(decision)
    return log


# --------------------------------------------------------------------- checking


@dataclass
class _Run:
    """A producer's data batches in one partition up to its next marker."""

    producer: int
    ranges: list[tuple[int, int]]
    max_ms: int
    epoch: int
    marker: str | None = None
    late: bool = False  # its own marker is missing: a later epoch's marker closed it

    @property
    def records(self) -> int:
        return sum(last - base + 1 for base, last in self.ranges)


def _runs(batches: list[Batch]) -> list[_Run]:
    open_runs: dict[int, list[_Run]] = {}  # producer -> its unmarked runs, one per epoch
    runs: list[_Run] = []
    for batch in batches:
        if not batch.transactional:
            continue
        pending = open_runs.get(batch.producer)
        if batch.control:
            if pending is not None:
                for run in pending:
                    run.marker = batch.marker
                    run.late = run is not pending[-1]
                del open_runs[batch.producer]
            continue  # a marker that closes no data here: nothing to attribute
        if pending is None:
            pending = open_runs[batch.producer] = []
        if not pending or batch.epoch != pending[-1].epoch:
            pending.append(_Run(batch.producer, [], batch.max_ms, batch.epoch))
            runs.append(pending[-1])
        run = pending[-1]
        run.ranges.append((batch.base, batch.last))
        run.max_ms = max(run.max_ms, batch.max_ms)
    return runs


def find_anomalies(
    segments: dict[TopicPart, list[Batch]],
    txn_log: TxnLog,
    visible: dict[TopicPart, set[int]],
    txn_prefix: str,
) -> Anomalies:
    """Anomalies of the partitions in ``segments``; ``visible``: the offsets a
    read_committed consumer returned, for the partitions where reads are checked (a
    partition absent from it is checked for torn transactions only)."""
    found = Anomalies()
    found.open_transactions = sorted(
        txn_id
        for txn_id, state in txn_log.last_state.items()
        if txn_id.startswith(txn_prefix) and state in OPEN_STATES
    )
    late: dict[Decision, list[str]] = defaultdict(list)  # unmarked runs' notes
    marked: set[Decision] = set()  # decisions some partition shows as decided
    for tp, batches in sorted(segments.items()):
        seen = visible.get(tp)
        nexts: dict[int, int] = defaultdict(int)  # producer -> next candidate decision
        for run in _runs(batches):
            found.records += run.records
            offsets = [o for base, last in run.ranges for o in range(base, last + 1)]
            if seen is not None:
                shown = sum(1 for o in offsets if o in seen)
                if run.marker == "COMMIT" and shown < len(offsets):
                    found.hidden_commits += len(offsets) - shown
                    found.note(f"{tp}: {len(offsets) - shown} committed records not read")
                elif run.marker != "COMMIT" and shown:
                    found.aborted_reads += shown
                    found.note(f"{tp}: {shown} records read from a {run.marker} transaction")
            decision = _attribute(run, tp, txn_log.decisions.get(run.producer, []), nexts)
            if decision is None:
                if run.marker is not None:  # undecided data is an open transaction's
                    found.torn += 1
                    found.note(
                        f"{tp}: {run.marker} of producer {run.producer} at "
                        f"{run.ranges[0][0]} matches no logged decision"
                    )
                continue
            found.transactions += 1
            what = (
                f"{tp}: {decision.txn_id} decided {decision.outcome} at "
                f"{decision.at_ms}, marker here {run.marker} (offset {run.ranges[0][0]})"
            )
            if run.marker == decision.outcome:
                marked.add(decision)
            elif run.late and run.marker == "ABORT":
                late[decision].append(f"{what}, closed by a later epoch's abort")
            else:
                found.torn += 1
                found.note(what)
    for decision, notes in late.items():
        if decision in marked:  # committed elsewhere, aborted here: visible in part
            found.torn += len(notes)
            for what in notes:
                found.note(what)
        else:
            found.unmarked += len(notes)
    return found


def _attribute(
    run: _Run, tp: TopicPart, decisions: list[Decision], nexts: dict[int, int]
) -> Decision | None:
    """The first decision of the run's producer naming ``tp``, no earlier than its data
    and after the one the previous run here took."""
    i = nexts[run.producer]
    while i < len(decisions):
        decision = decisions[i]
        i += 1
        if tp in decision.partitions and decision.at_ms >= run.max_ms:
            nexts[run.producer] = i
            return decision
    return None


# --------------------------------------------------------------------- reading


def dump_lines(files: list[Path], *options: str) -> Iterator[str]:
    """``DumpLogSegments`` over ``files``, line by line as it prints (outputs are large)."""
    if not files:
        return
    cmd = [find_java(), "-Dlog4j2.level=WARN", "-cp", str(tools_libs() / "*"), DUMP, *options]
    cmd += ["--files", ",".join(str(f) for f in files)]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1 << 20
    ) as proc:
        assert proc.stdout is not None
        yield from proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"DumpLogSegments exited {proc.returncode}")


def _leader_files(
    admin: AdminClient, topics: Iterable[str], log_dirs: dict[int, Path]
) -> list[Path]:
    """The segment files of each partition of ``topics`` in its current leader's log dir."""
    files: list[Path] = []
    metadata = admin.list_topics(timeout=10)
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            continue
        for p, part in sorted(info.partitions.items()):
            directory = log_dirs[part.leader] / f"{topic}-{p}"
            files += sorted(directory.glob("*.log"))
    return files


def log_dirs(brokers: Iterable[LocalBroker]) -> dict[int, Path]:
    """Each local broker's ``log.dirs`` by node id, for ``check``."""
    return {broker.node_id: broker.data_dir / "data" for broker in brokers}


def committed_offsets(
    bootstrap: str, topics: Iterable[str], isolation: str = "read_committed"
) -> dict[TopicPart, set[int]]:
    """The offset of every record a plain read_committed consumer returns, per partition
    (``isolation``: read_uncommitted, for the test that this check sees aborted reads)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"anomalies-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    out: dict[TopicPart, set[int]] = {}
    try:
        ends: dict[TopicPart, int] = {}
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                out[topic, p] = set()
                _, high = clients.watermark_offsets(consumer, TopicPartition(topic, p))
                if high > 0:
                    ends[topic, p] = high
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        while ends:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"{msg.topic()}: {msg.error()}")
                out[str(msg.topic()), msg.partition() or 0].add(msg.offset() or 0)
            positions = consumer.position([TopicPartition(t, p) for t, p in ends])
            for tp in positions:
                if tp.offset >= ends[tp.topic, tp.partition]:
                    del ends[tp.topic, tp.partition]
    finally:
        consumer.close()
    return out


def check(
    bootstrap: str,
    log_dirs: dict[int, Path],
    read_topics: list[str],
    txn_prefix: str,
    other_topics: Iterable[str] = (),
    isolation: str = "read_committed",
) -> Anomalies:
    """Every anomaly in ``read_topics`` (reads and transactions) and ``other_topics``
    (transactions only: a purged shuffle topic has no reads to check), once the job is done.

    ``log_dirs``: each broker's ``log.dirs`` by node id; ``txn_prefix``: the job's
    transactional ids' prefix (``<job>.``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    visible = committed_offsets(bootstrap, read_topics, isolation)
    topics = list(dict.fromkeys([*read_topics, *other_topics]))  # each once: see parse_segments
    files = _leader_files(admin, topics, log_dirs)
    segments = parse_segments(dump_lines(files, "--deep-iteration"))
    txn_files = _leader_files(admin, [TXN_LOG], log_dirs)
    txn_log = parse_txn_log(dump_lines(txn_files, "--transaction-log-decoder"))
    return find_anomalies(segments, txn_log, visible, txn_prefix)
