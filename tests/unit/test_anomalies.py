"""tests/anomalies.py's reading of Kafka's log dumps and its verdicts, on dumps shaped as
Kafka 4.4's DumpLogSegments prints them (lines trimmed of fields the parser skips)."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from tests.anomalies import Batch, find_anomalies, parse_segments, parse_txn_log


def _batch(base: int, last: int, pid: int, ms: int, control: bool = False, epoch: int = 0) -> str:
    return (
        f"baseOffset: {base} lastOffset: {last} count: {last - base + 1} baseSequence: 0 "
        f"lastSequence: 0 producerId: {pid} producerEpoch: {epoch} partitionLeaderEpoch: 0 "
        f"isTransactional: true isControl: {str(control).lower()} deleteHorizonMs: "
        f"OptionalLong.empty position: 0 CreateTime: {ms} size: 112 magic: 2 "
        "compresscodec: none crc: 1 isvalid: true"
    )


def _marker(offset: int, kind: str) -> str:
    return (
        f"| offset: {offset} CreateTime: 1 keySize: 4 valueSize: 6 sequence: -1 "
        f"headerKeys: [] endTxnMarker: {kind} coordinatorEpoch: 0"
    )


def _txn(
    txn_id: str, pid: int, status: str, parts: dict[str, list[int]], ms: int, epoch: int = 0
) -> str:
    key = {"type": "0", "data": {"transactionalId": txn_id}}
    value = {
        "version": "1",
        "data": {
            "producerId": pid,
            "producerEpoch": epoch,
            "transactionStatus": status,
            "transactionPartitions": [{"topic": t, "partitionIds": ps} for t, ps in parts.items()],
            "transactionLastUpdateTimestampMs": ms,
        },
    }
    return (
        "| offset: 0 CreateTime: 1 keySize: 10 valueSize: 64 sequence: -1 headerKeys: [] "
        f"key: {json.dumps(key)} payload: {json.dumps(value)}"
    )


# Producer 7 (job.0-0) writes out-0 and out-1 in two transactions: the first committed
# (records at 100 ms, decided at 120), the second aborted (records at 130, decided at 150).
SEGMENTS = [
    "Dumping /k/data/out-0/00000000000000000000.log",
    "Log starting offset: 0",
    _batch(0, 2, 7, 100),
    "| offset: 0 CreateTime: 100 keySize: -1 valueSize: 10 sequence: 0 headerKeys: []",
    _batch(3, 3, 7, 121, control=True),
    _marker(3, "COMMIT"),
    _batch(4, 5, 7, 130),
    _batch(6, 6, 7, 151, control=True),
    _marker(6, "ABORT"),
    "Dumping /k/data/out-1/00000000000000000000.log",
    _batch(0, 0, 7, 110),
    _batch(1, 1, 7, 122, control=True),
    _marker(1, "COMMIT"),
    _batch(2, 3, 7, 140),
    _batch(4, 4, 7, 152, control=True),
    _marker(4, "ABORT"),
    "Dumping /k/data/out-1/00000000000000000000.txnindex",
    "version: 0 producerId: 7 firstOffset: 2 lastOffset: 4 lastStableOffset: 5",
]
TXN_LOG = [
    "Dumping /k/data/__transaction_state-3/00000000000000000000.log",
    _txn("job.0-0", 7, "Ongoing", {"out": [0, 1]}, 101),
    _txn("job.0-0", 7, "PrepareCommit", {"out": [0, 1]}, 120),
    _txn("job.0-0", 7, "CompleteCommit", {}, 122),
    _txn("job.0-0", 7, "Ongoing", {"out": [0, 1]}, 131),
    _txn("job.0-0", 7, "PrepareAbort", {"out": [0, 1]}, 150),
    _txn("job.0-0", 7, "CompleteAbort", {}, 152),
    _txn("other.1", 9, "Ongoing", {"x": [0]}, 160),
]
# What a correct read_committed consumer returns: the first transaction's records.
VISIBLE = {("out", 0): {0, 1, 2}, ("out", 1): {0}}


def test_the_dump_parses_into_batches_markers_and_decisions() -> None:
    segments = parse_segments(SEGMENTS)
    assert set(segments) == {("out", 0), ("out", 1)}  # the txnindex dump is skipped
    assert segments["out", 0][1] == Batch(3, 3, 7, True, True, 121, "COMMIT")
    log = parse_txn_log(TXN_LOG)
    assert [(d.outcome, d.at_ms) for d in log.decisions[7]] == [("COMMIT", 120), ("ABORT", 150)]
    assert log.last_state == {"job.0-0": "CompleteAbort", "other.1": "Ongoing"}


def test_a_correct_run_has_no_anomaly() -> None:
    found = find_anomalies(parse_segments(SEGMENTS), parse_txn_log(TXN_LOG), VISIBLE, "job.")
    assert found.clean, found.examples
    assert (found.records, found.transactions) == (8, 4)


def test_a_record_of_an_aborted_transaction_that_is_read_is_an_aborted_read() -> None:
    visible = {**VISIBLE, ("out", 1): {0, 3}}
    found = find_anomalies(parse_segments(SEGMENTS), parse_txn_log(TXN_LOG), visible, "job.")
    assert (found.aborted_reads, found.hidden_commits, found.torn) == (1, 0, 0)


def test_a_committed_record_never_read_is_a_hidden_commit() -> None:
    visible = {**VISIBLE, ("out", 0): {0, 2}}
    found = find_anomalies(parse_segments(SEGMENTS), parse_txn_log(TXN_LOG), visible, "job.")
    assert (found.aborted_reads, found.hidden_commits, found.torn) == (0, 1, 0)


def test_a_marker_that_contradicts_the_decision_is_a_torn_transaction() -> None:
    # The first transaction committed in out-0 but aborted in out-1: half of it visible.
    segments = [
        line.replace("COMMIT", "ABORT") if "offset: 1 " in line else line for line in SEGMENTS
    ]
    visible = {("out", 0): {0, 1, 2}, ("out", 1): set()}
    found = find_anomalies(parse_segments(segments), parse_txn_log(TXN_LOG), visible, "job.")
    assert (found.aborted_reads, found.hidden_commits, found.torn) == (0, 0, 1)
    assert "decided COMMIT" in found.examples[0]


def test_data_no_logged_decision_accounts_for_is_torn() -> None:
    # The coordinator's log lost the first decision: out-0's committed data is unexplained.
    log = [line for line in TXN_LOG if "PrepareCommit" not in line]
    found = find_anomalies(parse_segments(SEGMENTS), parse_txn_log(log), VISIBLE, "job.")
    assert found.torn >= 1


@pytest.mark.parametrize("state", ["Ongoing", "PrepareCommit", "PrepareAbort"])
def test_a_job_transaction_left_undecided_is_open(state: str) -> None:
    log = [*TXN_LOG, _txn("job.1-0", 8, state, {"out": [0]}, 200)]
    found = find_anomalies(parse_segments(SEGMENTS), parse_txn_log(log), VISIBLE, "job.")
    assert found.open_transactions == ["job.1-0"]  # other.1 is another job's
    assert not found.clean


def test_data_before_a_decision_of_the_same_millisecond_goes_to_the_next() -> None:
    """Records of transaction k produced in the millisecond k-1 was decided belong to k:
    k-1's data here took k-1 already."""
    segments = [
        "Dumping /k/data/out-0/00000000000000000000.log",
        _batch(0, 0, 7, 100),
        _batch(1, 1, 7, 121, control=True),
        _marker(1, "COMMIT"),
        _batch(2, 2, 7, 120),  # produced in the millisecond of the first decision
        _batch(3, 3, 7, 141, control=True),
        _marker(3, "ABORT"),
    ]
    log = [
        _txn("job.0-0", 7, "PrepareCommit", {"out": [0]}, 120),
        _txn("job.0-0", 7, "PrepareAbort", {"out": [0]}, 140),
        _txn("job.0-0", 7, "CompleteAbort", {}, 141),
    ]
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), {("out", 0): {0}}, "job.")
    assert found.clean and found.transactions == 2, found.examples


def test_a_segment_dumped_twice_is_read_once() -> None:
    """A topic both read and named among the others once made every transaction of it
    look torn (its runs twice over, the second copy matching no decision)."""
    twice = parse_segments(SEGMENTS + SEGMENTS)
    assert twice == parse_segments(SEGMENTS)
    found = find_anomalies(twice, parse_txn_log(TXN_LOG), VISIBLE, "job.")
    assert found.clean and found.records == 8


def _unmarked_commit(markers_of_out_1: str) -> list[str]:
    """Producer 7 commits at 120 but no marker is written; its next incarnation (epoch 1)
    writes one record into each partition and aborts at 140 (``abort_leftovers``)."""
    segments = []
    for p in (0, 1):
        segments += [
            f"Dumping /k/data/out-{p}/00000000000000000000.log",
            _batch(0, 1, 7, 100),
            _batch(2, 2, 7, 130, epoch=1),
            _batch(3, 3, 7, 141, control=True, epoch=1),
            _marker(3, "ABORT"),
        ]
    if markers_of_out_1 == "COMMIT":  # out-1 got the commit's marker before the restart
        segments[-5:] = [
            "Dumping /k/data/out-1/00000000000000000000.log",
            _batch(0, 1, 7, 100),
            _batch(2, 2, 7, 121, control=True),
            _marker(2, "COMMIT"),
            _batch(3, 3, 7, 130, epoch=1),
            _batch(4, 4, 7, 141, control=True, epoch=1),
            _marker(4, "ABORT"),
        ]
    return segments


UNMARKED_LOG = [
    _txn("job.0-0", 7, "PrepareCommit", {"out": [0, 1]}, 120),
    _txn("job.0-0", 7, "CompleteCommit", {}, 121),
    _txn("job.0-0", 7, "PrepareAbort", {"out": [0, 1]}, 140, epoch=1),
    _txn("job.0-0", 7, "CompleteAbort", {}, 141, epoch=1),
]


def test_a_decision_that_got_no_marker_and_was_aborted_later_is_unmarked_not_torn() -> None:
    """The chaos run's broker restart: the whole commit stayed unmarked, and the next
    incarnation's abort closed it in every partition: invisible everywhere, consistent."""
    segments = parse_segments(_unmarked_commit("none"))
    found = find_anomalies(segments, parse_txn_log(UNMARKED_LOG), {}, "job.")
    assert found.clean, found.examples
    assert (found.unmarked, found.transactions) == (2, 4)


def test_a_decision_committed_in_one_partition_and_aborted_late_in_another_is_torn() -> None:
    segments = parse_segments(_unmarked_commit("COMMIT"))
    found = find_anomalies(segments, parse_txn_log(UNMARKED_LOG), {}, "job.")
    assert (found.torn, found.unmarked) == (1, 0)
    assert "closed by a later epoch's abort" in found.examples[0]


def _fenced_zombie() -> tuple[list[str], list[str]]:
    """Producer 7's first incarnation (epoch 0) is fenced at 130 by its next one, whose
    InitProducerId aborts the open transaction with epoch 1 and gets epoch 2; the zombie,
    still running, made a record at 132 that reached out-0 before the abort's marker (135).
    The next incarnation aborts its leftovers (an empty record into each partition, decided
    at 145), then commits twice (160, 180). The zombie's transaction had added out-1 but
    none of its records got there: out-1 has the abort's marker alone."""
    segments = [
        "Dumping /k/data/out-0/00000000000000000000.log",
        _batch(0, 1, 7, 100),
        _batch(2, 2, 7, 132),  # made after the coordinator decided the abort
        _batch(3, 3, 7, 135, control=True, epoch=1),
        _marker(3, "ABORT"),
        _batch(4, 4, 7, 140, epoch=2),  # abort_leftovers' empty record
        _batch(5, 5, 7, 146, control=True, epoch=2),
        _marker(5, "ABORT"),
        _batch(6, 7, 7, 150, epoch=2),
        _batch(8, 8, 7, 161, control=True, epoch=2),
        _marker(8, "COMMIT"),
        _batch(9, 9, 7, 170, epoch=2),
        _batch(10, 10, 7, 181, control=True, epoch=2),
        _marker(10, "COMMIT"),
        "Dumping /k/data/out-1/00000000000000000000.log",
        _batch(0, 0, 7, 136, control=True, epoch=1),
        _marker(0, "ABORT"),
        _batch(1, 1, 7, 141, epoch=2),
        _batch(2, 2, 7, 146, control=True, epoch=2),
        _marker(2, "ABORT"),
        _batch(3, 3, 7, 155, epoch=2),
        _batch(4, 4, 7, 161, control=True, epoch=2),
        _marker(4, "COMMIT"),
        _batch(5, 5, 7, 175, epoch=2),
        _batch(6, 6, 7, 181, control=True, epoch=2),
        _marker(6, "COMMIT"),
    ]
    both = {"out": [0, 1]}
    log = [
        _txn("job.0-0", 7, "Ongoing", both, 99),
        _txn("job.0-0", 7, "PrepareAbort", both, 130, epoch=1),
        _txn("job.0-0", 7, "CompleteAbort", {}, 131, epoch=1),
        _txn("job.0-0", 7, "PrepareAbort", both, 145, epoch=2),
        _txn("job.0-0", 7, "CompleteAbort", {}, 145, epoch=2),
        _txn("job.0-0", 7, "PrepareCommit", both, 160, epoch=2),
        _txn("job.0-0", 7, "CompleteCommit", {}, 160, epoch=2),
        _txn("job.0-0", 7, "PrepareCommit", both, 180, epoch=2),
        _txn("job.0-0", 7, "CompleteCommit", {}, 180, epoch=2),
    ]
    return segments, log


def test_a_fenced_zombies_record_made_after_its_abort_is_still_its_transactions() -> None:
    """Matched by the records' timestamps, out-0's zombie run (newest at 132) skipped its
    abort (130) and took the leftovers' abort, and every later run of the producer took the
    decision after its own: the leftovers' run read as "decided COMMIT at 160, marker here
    ABORT" (test_chaos_short, seed 7, once under load), the last run as matching no
    decision. Each marker names its decision (its epoch, written after it), and the data
    before a marker is that decision's."""
    segments, log = _fenced_zombie()
    visible = {("out", 0): {6, 7, 9}, ("out", 1): {3, 5}}
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), visible, "job.")
    assert found.clean, found.examples
    assert (found.records, found.transactions, found.unmarked) == (10, 7, 0)


def test_a_fenced_transaction_committed_in_a_partition_is_torn() -> None:
    """The same log with the fence's marker in out-0 a COMMIT: the zombie's run is
    committed there, aborted in out-1."""
    segments, log = _fenced_zombie()
    segments[4] = _marker(3, "COMMIT")
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), {}, "job.")
    assert found.torn == 1, found.examples
    assert "decided ABORT at 130, marker here COMMIT (offset 3)" in found.examples[0]


def _unmarked_then_aborted(out_1: str) -> tuple[list[str], list[str]]:
    """Producer 7 commits at 120 into out-0 and out-1 and a restarting broker writes no
    marker (``out_1="COMMIT"``: out-1's only); the same producer, epoch and all, goes on: its
    next transaction named both partitions, got a record into out-1 only (out-0's timed
    out) and aborted at 140, its markers closing the commit's open data too."""
    segments = [
        "Dumping /k/data/out-0/00000000000000000000.log",
        _batch(0, 1, 7, 100),
        _batch(2, 2, 7, 141, control=True),
        _marker(2, "ABORT"),
        "Dumping /k/data/out-1/00000000000000000000.log",
        _batch(0, 0, 7, 110),
        *([_batch(1, 1, 7, 121, control=True), _marker(1, "COMMIT")] if out_1 else []),
        _batch(2, 2, 7, 130),
        _batch(3, 3, 7, 141, control=True),
        _marker(3, "ABORT"),
    ]
    log = [
        _txn("job.0-0", 7, "PrepareCommit", {"out": [0, 1]}, 120),
        _txn("job.0-0", 7, "CompleteCommit", {}, 120),
        _txn("job.0-0", 7, "PrepareAbort", {"out": [0, 1]}, 140),
        _txn("job.0-0", 7, "CompleteAbort", {}, 140),
    ]
    return segments, log


def test_an_unmarked_commit_the_same_producers_next_abort_closes_is_unmarked() -> None:
    """Matched by timestamps, out-0's run (the commit's data alone) took the commit and read
    as "decided COMMIT at 120, marker here ABORT (offset 0)": torn, though the commit shows
    nowhere (a broker restart in test_chaos_short could leave just that)."""
    segments, log = _unmarked_then_aborted("")
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), {}, "job.")
    assert found.clean, found.examples
    assert (found.unmarked, found.transactions) == (2, 3)


def test_an_unmarked_commit_shown_committed_elsewhere_and_aborted_here_is_torn() -> None:
    segments, log = _unmarked_then_aborted("COMMIT")
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), {}, "job.")
    assert (found.torn, found.unmarked) == (1, 0), found.examples
    assert "closed by a later transaction's abort" in found.examples[0]


def _restart_in_a_commit(next_ends: str) -> tuple[list[str], list[str]]:
    """shuffle-0 of producer 12 (split-1) in a test_chaos_short run (seed 14, under load),
    as dumped: the broker restarted as the task committed at ...902545; the coordinator
    logged the commit complete and wrote no marker anywhere (nor for its offsets). The task
    went on in epoch 0 (its commit returned): the next transaction's record (...935649)
    joined the open data, and was fenced (epoch 1) when the task moved. With
    ``next_ends="abort"``, what the torn report fits: that next transaction instead got no
    record into this partition and ended in its own abort, epoch 0 (the task failing)."""
    fenced = next_ends == "fenced"
    segments = [
        "Dumping /k/data/job.shuffle-0/00000000000000000000.log",
        _batch(30, 31, 12, 1796522900295),
        _batch(35, 35, 12, 1796522900465, control=True),
        _marker(35, "COMMIT"),
        _batch(38, 38, 12, 1796522902381),  # committed at ...902545, never marked
        *([_batch(40, 40, 12, 1796522935649)] if fenced else []),
        _batch(42, 42, 12, 1796522940127, control=True, epoch=int(fenced)),
        _marker(42, "ABORT"),
        _batch(45, 45, 12, 1796522940636, epoch=1 + int(fenced)),  # abort_leftovers
        _batch(47, 47, 12, 1796522942813, control=True, epoch=1 + int(fenced)),
        _marker(47, "ABORT"),
    ]
    parts = {"job.shuffle": [0]}
    log = [
        _txn("job.split-1", 12, "PrepareCommit", parts, 1796522900463),
        _txn("job.split-1", 12, "CompleteCommit", {}, 1796522900463),
        _txn("job.split-1", 12, "PrepareCommit", parts, 1796522902545),
        _txn("job.split-1", 12, "CompleteCommit", {}, 1796522902545),
        _txn("job.split-1", 12, "PrepareAbort", parts, 1796522938455, int(fenced)),
        _txn("job.split-1", 12, "CompleteAbort", {}, 1796522938532, int(fenced)),
        _txn("job.split-1", 12, "PrepareAbort", parts, 1796522942772, 1 + int(fenced)),
        _txn("job.split-1", 12, "CompleteAbort", {}, 1796522942775, 1 + int(fenced)),
    ]
    return segments, log


@pytest.mark.parametrize("next_ends", ["fenced", "abort"])
def test_a_commit_a_broker_restart_left_unmarked_is_unmarked_whatever_closes_it(
    next_ends: str,
) -> None:
    """Matched by timestamps, the dumped log's unmarked commit went unseen (its record ran
    into the next transaction's, both given to the fence), and in the variant its record
    took the commit and read "decided COMMIT at 1796522902545, marker here ABORT (offset
    38)": the torn report's shape, for a commit that shows nowhere."""
    segments, log = _restart_in_a_commit(next_ends)
    found = find_anomalies(parse_segments(segments), parse_txn_log(log), {}, "job.")
    assert found.clean, found.examples
    assert (found.unmarked, found.transactions) == (1, 3 + (next_ends == "fenced"))


class _Producer:
    """A model of one transactional producer (job.0-0, id 7) writing into out-0..2, shaped as
    Kafka 4.4 logs it (version 1 transactions: one epoch until the next incarnation), with
    what the check must conclude: commits, aborts, fences of a live zombie (its records can
    follow the abort's decision), commits whose markers Kafka skipped (closed by
    ``abort_leftovers`` or by the same producer's next transaction), and every clock tie the
    order allows (the records of a transaction at or after the previous decision; markers at
    or after their decision, before the next)."""

    PARTS = 3

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ms = 1000
        self.epoch = 0
        self.segments: dict[int, list[str]] = {p: [] for p in range(self.PARTS)}
        self.txn_log: list[str] = []
        self.visible: dict[tuple[str, int], set[int]] = {("out", p): set() for p in range(3)}
        self.offsets = [0] * self.PARTS
        self.marked_ms = 0  # when the last marker was written
        self.pending: dict[int, list[tuple[int, int]]] = {p: [] for p in range(self.PARTS)}
        self.outcomes: list[str] = []  # decision number -> COMMIT or ABORT
        self.closed: dict[int, list[str]] = defaultdict(list)  # -> the markers its data got

    def verdict(self) -> tuple[int, int, int]:
        """(transactions, torn, unmarked) as the check must count them: a commit whose data
        an abort closed in some partition (its markers skipped) is torn there if another
        partition shows it committed, else unmarked."""
        transactions = torn = unmarked = 0
        for owner, markers in self.closed.items():
            transactions += len(markers)
            against = sum(1 for m in markers if m != self.outcomes[owner])
            if self.outcomes[owner] in markers:
                torn += against
            else:
                unmarked += against
        return transactions, torn, unmarked

    def tick(self) -> int:
        self.ms += self.rng.randint(0, 2)
        return self.ms

    def offset(self, p: int) -> int:
        self.offsets[p] += 1
        return self.offsets[p] - 1

    def write(self, p: int, epoch: int, ms: int, owner: int | None = None) -> None:
        """A record of the next decision (or of ``owner``, a decision already logged)."""
        offset = self.offset(p)
        self.segments[p].append(_batch(offset, offset, 7, ms, epoch=epoch))
        self.pending[p].append((len(self.outcomes) if owner is None else owner, offset))

    def decide(self, outcome: str, parts: list[int], epoch: int, marked: bool = True) -> None:
        status = "Commit" if outcome == "COMMIT" else "Abort"
        named = {"out": sorted(parts)}
        # Not in the millisecond of the last marker: the producer learnt of the previous
        # transaction's end, made this one's records and ended it since.
        self.ms = max(self.tick(), self.marked_ms + 1)
        self.txn_log.append(_txn("job.0-0", 7, f"Prepare{status}", named, self.ms, epoch))
        self.outcomes.append(outcome)
        self.txn_log.append(_txn("job.0-0", 7, f"Complete{status}", {}, self.tick(), epoch))
        for p in sorted(parts) if marked else []:
            self.mark(p, outcome, epoch)

    def mark(self, p: int, outcome: str, epoch: int) -> None:
        offset = self.offset(p)
        self.marked_ms = self.tick()
        self.segments[p] += [_batch(offset, offset, 7, self.marked_ms, True, epoch)]
        self.segments[p] += [_marker(offset, outcome)]
        for owner in {owner for owner, _ in self.pending[p]}:
            assert self.outcomes[owner] == outcome or outcome == "ABORT", "no abort committed"
            self.closed[owner].append(outcome)
        if outcome == "COMMIT":
            self.visible["out", p] |= {offset for _, offset in self.pending[p]}
        self.pending[p] = []

    def transaction(self, kind: str = "") -> None:
        kinds = ["commit", "commit", "abort", "fence", "skipped", "skipped, going on"]
        kind = kind or self.rng.choice(kinds)
        parts = self.rng.sample(range(self.PARTS), self.rng.randint(1, self.PARTS))
        for p in parts:
            for _ in range(self.rng.randint(1, 2)):
                self.write(p, self.epoch, self.tick())
        if kind == "commit":
            self.decide("COMMIT", parts, self.epoch)
        elif kind == "abort":  # perhaps naming a partition its record never reached
            named = parts + [p for p in range(self.PARTS) if p not in parts][:1]
            self.decide("ABORT", named if self.rng.random() < 0.5 else parts, self.epoch)
        elif kind == "skipped, going on":  # its producer saw it committed: the same epoch
            self.decide("COMMIT", parts, self.epoch, marked=False)
            # The one tie the logs cannot settle: the next transaction's records in the
            # millisecond of this decision, in its run.
            self.ms += 1
        elif kind == "fence":  # the next incarnation's InitProducerId aborts it at epoch + 1
            named = parts + [p for p in range(self.PARTS) if p not in parts][:1]
            self.decide("ABORT", named, self.epoch + 1, marked=False)
            for p in sorted(named):
                if p in parts and self.rng.random() < 0.5:  # the zombie, still producing
                    self.write(p, self.epoch, self.tick(), owner=len(self.outcomes) - 1)
                self.mark(p, "ABORT", self.epoch + 1)
            self.epoch += 2
            self.leftovers()
        else:  # skipped (by a restarting broker), and the task's next incarnation
            self.decide("COMMIT", parts, self.epoch, marked=False)
            self.epoch += 1
            self.leftovers()

    def leftovers(self) -> None:
        """``abort_leftovers``: an empty record into every partition, aborted."""
        for p in range(self.PARTS):
            self.write(p, self.epoch, self.tick())
        self.decide("ABORT", list(range(self.PARTS)), self.epoch)

    def dump(self) -> list[str]:
        lines = []
        for p, segment in self.segments.items():
            lines += [f"Dumping /k/data/out-{p}/00000000000000000000.log", *segment]
        return lines


@pytest.mark.parametrize("seed", range(200))
def test_modelled_histories_are_attributed_exactly(seed: int) -> None:
    model = _Producer(seed)
    for _ in range(model.rng.randint(1, 12)):
        model.transaction()
    segments, log = parse_segments(model.dump()), parse_txn_log(model.txn_log)
    found = find_anomalies(segments, log, model.visible, "job.")
    assert (found.aborted_reads, found.hidden_commits, found.open_transactions) == (0, 0, [])
    assert (found.transactions, found.torn, found.unmarked) == model.verdict(), found.examples


@pytest.mark.parametrize("seed", range(100))
def test_a_modelled_commit_aborted_in_one_partition_is_torn(seed: int) -> None:
    model = _Producer(seed)
    for _ in range(model.rng.randint(0, 11)):
        model.transaction()
    model.transaction("commit")
    lines = model.dump()
    i = model.rng.choice([i for i, line in enumerate(lines) if "endTxnMarker: COMMIT" in line])
    lines[i] = lines[i].replace("COMMIT", "ABORT")
    found = find_anomalies(parse_segments(lines), parse_txn_log(model.txn_log), {}, "job.")
    assert found.torn >= 1, found.to_json()
