"""What a keyed task writes into its open transaction when it closes an epoch, and what that
transaction carries until it commits.

An epoch's records (sink, shuffle, feedback and dead records) go out as `drain` takes them
from the chain, then the task's watermark and barrier n into every downstream shuffle
partition. A transaction whose snapshot fails is aborted (`keyed_checkpoint`): the records
it carried, not its barriers, are written again into the next one, before that epoch's own.
"""

from __future__ import annotations

from collections.abc import Mapping

from processor import metrics
from processor.engine.chain import DeadRecord, StageChain
from processor.engine.epoch import Drained, drain
from processor.engine.time import Mark
from processor.kafka.output import TransactionalOutput
from processor.models.records import Barrier, encode_barrier
from processor.worker.deadletter import DeadLetters
from processor.worker.epoch_out import Segment, segments_of, ship, write_mark

# Per downstream shuffle: (key_by name, topic, partitions, the task's channel in it).
Shuffle = tuple[str, str, int, int]


class EpochWriter:
    """The task's output into its open transaction, and the ledger of what that transaction
    carries (``in_txn``) or must carry again after an abort (``resend``)."""

    def __init__(
        self,
        shuffles: list[Shuffle],
        feedback: tuple[str, int] | None,
        fed_topic: str | None,
        dlq: DeadLetters,
        labels: Mapping[str, str],
    ) -> None:
        self._outputs = [(name, channel) for name, _, _, channel in shuffles]
        self._topics = [topic for _, topic, _, _ in shuffles]
        self._marks = [(topic, n, channel) for _, topic, n, channel in shuffles]
        self._feedback = feedback  # a loop's (shuffle name, the task's channel in it)
        self._fed_topic = fed_topic
        self.dlq = dlq
        skipped = metrics.records_skipped
        self._m_oversized = skipped.labels(**labels, reason="oversized_key")
        # Records written into the open transaction (barriers aside): if its snapshot fails
        # it is aborted, and these go out again with the next epoch (see `aborted`).
        self._in_txn: list[Segment] = []
        self._resend: list[Segment] = []
        self._dead_in_txn: list[DeadRecord] = []  # the same, for the dead records
        self._dead_resend: list[DeadRecord] = []

    def drain(self, chain: StageChain, operators: bool = True) -> Drained:
        """The chain's epoch so far: its state written (``operators``), its output taken."""
        return drain(chain, self._outputs, self._feedback, operators)

    def ship(self, out: TransactionalOutput, drained: Drained) -> int:
        """``drained`` (after what an aborted transaction carried) into the open
        transaction; returns the records produced, dead ones not counted."""
        if drained.oversized:
            self._m_oversized.inc(drained.oversized)
        if drained.dead or self._dead_resend:
            self.dead_letter(out, drained.dead)
        segments = self._resend + segments_of(drained, self._topics, self._fed_topic)
        self._resend = []
        if not segments:
            return 0
        shipped = ship(out, segments)
        self._in_txn.extend(segments)
        return shipped

    def dead_letter(self, out: TransactionalOutput, dead: list[DeadRecord]) -> None:
        """``dead``, and those of an aborted transaction, into the open one."""
        if self._dead_resend:
            self.dlq.failed(out, self._dead_resend, again=True)
            self._dead_in_txn.extend(self._dead_resend)
            self._dead_resend = []
        self.dlq.failed(out, dead)
        self._dead_in_txn.extend(dead)

    def mark(self, out: TransactionalOutput, mark: Mark) -> None:
        """The task's watermark into every downstream shuffle partition."""
        write_mark(out, self._marks, mark)

    def barriers(self, out: TransactionalOutput, checkpoint_id: int, triggered_at_ms: int) -> None:
        """Barrier ``checkpoint_id`` into every downstream shuffle partition."""
        for topic, partitions, channel in self._marks:
            value, headers = encode_barrier(Barrier(checkpoint_id, channel, triggered_at_ms))
            for p in range(partitions):
                out.produce(topic, value, partition=p, headers=headers)

    def committed(self) -> None:
        """The open transaction committed: nothing of it is written again."""
        self._in_txn.clear()
        self._dead_in_txn.clear()

    def aborted(self, transactional: bool) -> None:
        """The open transaction was aborted: what it carried goes out again, first thing in
        the next one (``transactional`` False: it is out already)."""
        if transactional:
            self._resend = self._in_txn + self._resend
            self._dead_resend = self._dead_in_txn + self._dead_resend
        self._in_txn = []
        self._dead_in_txn = []
