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

The chaos runs check their sinks (reads and transactions), their shuffles and
``__consumer_offsets`` (transactions): a task's offset commit is part of its transaction, so
an epoch whose output committed while its input positions were aborted (the task would then
replay it: duplicates) is torn there.

Not an anomaly of the job, but counted (``unmarked``): a transaction whose coordinator
logged a decision and wrote no marker at all (on a single broker's graceful restart it can
complete a commit while the partitions have no leader), so that its data stays open until
the producer's next marker there closes it: the task's next incarnation's abort
(``TransactionalOutput.abort_leftovers``; that data is followed by the next epoch's before
any marker), or the same producer's next transaction, in the same epoch, which may abort
(the task failing after the restart) and name a partition it got no record into. It is torn
only if another partition of the same decision shows it committed.

Kafka's own ``kafka-dump-log`` (``DumpLogSegments``, fetched by processor/localkafka/tools.py)
reads the segment files of each partition's current leader: the batches with their producer
ids and timestamps, the COMMIT/ABORT markers, and the coordinator's transaction log.

Linking a partition's data to its transaction, from the brokers' facts rather than the
producers' clocks. The coordinator writes a transaction's markers after it logged the
decision (PrepareCommit/PrepareAbort) and before the producer's next decision (the next
transaction cannot add a partition until this one is complete), with the decision's
producer epoch, stamped by the partition leader's clock (one machine's for a cluster). So a
marker is the last decision of its producer naming the partition, with the marker's epoch
and outcome, logged no later than the marker was written (and none before the previous
marker's). A producer's data before a marker is that decision's, unless decisions naming
the partition since the previous marker got no marker here (``unmarked``): then a run of an
older epoch goes to the decisions of its epoch (or to an abort one epoch above: a fenced or
timed-out transaction is aborted with the bumped epoch), and data of one epoch that several
decisions could own is split by its timestamps (a transaction its producer decided has all
its records made before the decision, the next one's after it).

Not the records' timestamps alone: a transaction the coordinator aborts (a fenced zombie's,
a timed-out one's) can still get records its producer makes after that decision, appended
before the abort's marker; matched by timestamps, such a run skipped its decision and every
later run of the producer took the decision after its own (an abort_leftovers run in a
shuffle read as a commit "decided COMMIT, marker here ABORT", test_chaos_short seed 7).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
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
OFFSETS_LOG = "__consumer_offsets"  # a transaction's offset commits: checked as its data
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
DECISIONS = {"PrepareCommit": "COMMIT", "PrepareAbort": "ABORT"}
COMPLETE = frozenset({"CompleteCommit", "CompleteAbort"})

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
    epoch: int = 0
    # The time its Complete* record carries (taken as the markers go out: before they are
    # written, unless the coordinator sent them again after a restart); None: not logged.
    done_ms: int | None = None


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
    deciding: dict[str, int] = {}  # transactional id -> producer, while its decision is open
    for line in lines:
        m = _TXN_RECORD.search(line)
        if m is None:
            continue
        try:
            key, value = json.loads(m.group(1)), json.loads(m.group(2))
            txn_id = str(key["data"]["transactionalId"])
            data = value["data"]
            status = str(data["transactionStatus"])
            producer = int(data["producerId"])
            at_ms = int(data["transactionLastUpdateTimestampMs"])
        except (ValueError, KeyError, TypeError):
            continue  # a tombstone or another record type: no state of a transaction
        log.last_state[txn_id] = status
        if status in COMPLETE and txn_id in deciding:
            same = log.decisions[deciding.pop(txn_id)]
            same[-1] = replace(same[-1], done_ms=at_ms)
            continue
        outcome = DECISIONS.get(status)
        if outcome is None:
            continue
        parts = frozenset(
            (str(entry["topic"]), int(p))
            for entry in data.get("transactionPartitions") or []
            for p in entry["partitionIds"]
        )
        epoch = int(data.get("producerEpoch", 0))
        decision = Decision(txn_id, producer, outcome, parts, at_ms, epoch)
        same = log.decisions[producer]
        # A coordinator may log a decision twice (reloaded after a restart).
        if not same or replace(same[-1], done_ms=None) != decision:
            same.append(decision)
        deciding[txn_id] = producer
    return log


# --------------------------------------------------------------------- checking


@dataclass
class _Run:
    """A producer's data batches of one epoch in one partition, up to its next marker."""

    producer: int
    epoch: int
    batches: list[tuple[int, int, int]] = field(default_factory=list)  # base, last, max_ms

    @property
    def records(self) -> int:
        return sum(last - base + 1 for base, last, _ in self.batches)

    def offsets(self) -> list[int]:
        return [o for base, last, _ in self.batches for o in range(base, last + 1)]


@dataclass
class _Closing:
    """A producer's marker in a partition and the runs it closed, the oldest epoch first."""

    producer: int
    epoch: int
    marker: str | None  # COMMIT or ABORT
    at_ms: int  # the partition leader's clock when it wrote the marker
    offset: int
    runs: list[_Run]


def _closings(batches: list[Batch]) -> tuple[list[_Closing], list[_Run]]:
    """Every marker of a partition with the data it closed, and the data left open."""
    open_runs: dict[int, list[_Run]] = {}  # producer -> its unmarked runs, one per epoch
    closings: list[_Closing] = []
    for batch in batches:
        if not batch.transactional:
            continue
        if batch.control:
            runs = open_runs.pop(batch.producer, [])
            closings.append(
                _Closing(batch.producer, batch.epoch, batch.marker, batch.max_ms, batch.base, runs)
            )
            continue
        pending = open_runs.setdefault(batch.producer, [])
        if not pending or batch.epoch != pending[-1].epoch:
            pending.append(_Run(batch.producer, batch.epoch))
        pending[-1].batches.append((batch.base, batch.last, batch.max_ms))
    return closings, [run for runs in open_runs.values() for run in runs]


def _marker_decision(closing: _Closing, decisions: list[Decision], start: int) -> int | None:
    """The index in ``decisions`` (its producer's, naming the partition) of the one that
    wrote ``closing``'s marker: from ``start`` on, of the marker's epoch, logged no later
    than the marker was written, with its outcome (failing that, without it: a marker that
    contradicts its decision); the last of those already complete then (a decision logged in
    the marker's millisecond after it is not), failing that the last."""
    fits: list[int] = []
    for i in range(max(start, 0), len(decisions)):
        if decisions[i].at_ms > closing.at_ms:
            break  # logged after the marker was written (a producer's decisions in order)
        if decisions[i].epoch == closing.epoch:
            fits.append(i)
    best = [i for i in fits if decisions[i].outcome == closing.marker] or fits
    done = [i for i in best if (decisions[i].done_ms or decisions[i].at_ms) <= closing.at_ms]
    last = done or best
    return last[-1] if last else None


def _owners(run: _Run, window: list[Decision]) -> dict[Decision, list[tuple[int, int, int]]]:
    """``run``'s batches by the decision each belongs to, among ``window`` (the decisions
    naming the partition since the previous marker, up to the closing marker's): those of
    the run's epoch or, for an abort, one above it; several such split it by timestamps."""
    fit = [
        d
        for d in window
        if d.epoch == run.epoch or (d.outcome == "ABORT" and d.epoch == run.epoch + 1)
    ]
    owners: dict[Decision, list[tuple[int, int, int]]] = defaultdict(list)
    if fit:
        for batch in run.batches:
            owner = next((d for d in fit if d.at_ms >= batch[2]), fit[-1])
            owners[owner].append(batch)
    return owners


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
    late: dict[Decision, list[str]] = defaultdict(list)  # unmarked decisions' notes
    marked: set[Decision] = set()  # decisions some partition shows as decided
    for tp, batches in sorted(segments.items()):
        seen = visible.get(tp)
        closings, left_open = _closings(batches)
        for run in left_open:
            _reads(found, tp, run, None, seen)
        taken: dict[int, int] = {}  # producer -> index of its last marker's decision here
        naming: dict[int, list[Decision]] = {}  # producer -> its decisions naming tp
        for closing in closings:
            for run in closing.runs:
                _reads(found, tp, run, closing.marker, seen)
            mine = naming.get(closing.producer)
            if mine is None:
                every = txn_log.decisions.get(closing.producer, [])
                mine = naming[closing.producer] = [d for d in every if tp in d.partitions]
            last = taken.get(closing.producer, -1)
            # A marker closing data is a new decision's; one closing none may be resent.
            j = _marker_decision(closing, mine, last + 1 if closing.runs else last)
            if j is None:
                if closing.runs:  # a marker no decision wrote, closing data
                    found.torn += 1
                    found.note(
                        f"{tp}: {closing.marker} of producer {closing.producer} at "
                        f"{closing.offset} matches no logged decision"
                    )
                continue
            taken[closing.producer] = j
            decision = mine[j]
            what = (
                f"{tp}: {decision.txn_id} decided {decision.outcome} at "
                f"{decision.at_ms}, marker here {closing.marker} (offset {closing.offset})"
            )
            if decision.outcome == closing.marker:
                marked.add(decision)
            else:  # the coordinator's own marker contradicts its decision
                found.torn += 1
                found.note(what)
            window = mine[last + 1 : j + 1] if j > last else [decision]
            first_ms = min((b[2] for run in closing.runs for b in run.batches), default=0)
            # Decisions before this data's first record own none of it (older segments gone).
            window = [d for d in window[:-1] if d.at_ms >= first_ms] + [decision]
            for run in closing.runs:
                owners = _owners(run, window)
                if not owners:
                    found.torn += 1
                    found.note(
                        f"{tp}: data of producer {run.producer} epoch {run.epoch} at "
                        f"{run.batches[0][0]} matches no logged decision"
                    )
                for owner, owned in owners.items():
                    found.transactions += 1
                    if owner is decision:
                        continue  # judged with its marker above
                    if owner.outcome == closing.marker:  # unmarked here, closed alike
                        marked.add(owner)
                        continue
                    what = (
                        f"{tp}: {owner.txn_id} decided {owner.outcome} at {owner.at_ms}, no "
                        f"marker here, its data (offset {owned[0][0]}) closed by a later "
                        f"{'epoch' if closing.epoch != run.epoch else 'transaction'}'s "
                        f"{str(closing.marker).lower()}"
                    )
                    if closing.marker == "ABORT":
                        late[owner].append(what)
                    else:  # an aborted transaction's data committed by a later one
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


def _reads(
    found: Anomalies, tp: TopicPart, run: _Run, marker: str | None, seen: set[int] | None
) -> None:
    """Count ``run``'s records and check what a read_committed reader saw of them."""
    found.records += run.records
    if seen is None:
        return
    offsets = run.offsets()
    shown = sum(1 for o in offsets if o in seen)
    if marker == "COMMIT" and shown < len(offsets):
        found.hidden_commits += len(offsets) - shown
        found.note(f"{tp}: {len(offsets) - shown} committed records not read")
    elif marker != "COMMIT" and shown:
        found.aborted_reads += shown
        found.note(f"{tp}: {shown} records read from a {marker} transaction")


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
