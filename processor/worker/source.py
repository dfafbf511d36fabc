"""Source task: reads a source topic's partition, runs its stage's operators, writes the
shuffles of the stages downstream and the stage's sinks.

Sources have no alignment to do: the coordinator's trigger *is* their barrier. At trigger n
a source flushes its stage (the combiners' partial aggregates, buffered sink records), writes
barrier n into every partition of every downstream shuffle and commits one transaction
holding the epoch's writes, the barriers and its input offsets. The commit's round trips run
in the background while the source reads and combines epoch n+1 (whose records only go out
at trigger n+1, or earlier if the buffers outgrow ``flush_keys`` once checkpoint n has
completed: see `SourceTask._may_write_early`; until then a source with full buffers reads
no further).

In a timed pipeline the source also tracks its watermark (`processor.engine.time`) and
writes it into every downstream shuffle partition at each checkpoint, after the epoch's
records and before the barrier, when it changed.

Pre-aggregation (the combiner) is exact: partial aggregates of one epoch are committed
together with the input offsets they cover, so a replay recomputes exactly the same ones.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from processor import faults, metrics
from processor.engine.chain import StageChain
from processor.engine.dead import Position
from processor.engine.epoch import drain
from processor.engine.time import SourceWatermarks, source_marks
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput, open_output
from processor.models import fastjson, limits
from processor.models.records import Barrier, encode_barrier
from processor.serde import loads_all
from processor.serde.codec import RecordError, decode
from processor.worker import gaps, source_meta
from processor.worker.deadletter import DeadLetters
from processor.worker.epoch_out import segments_of, ship, write_mark
from processor.worker.postgres_orphans import after_savepoint
from processor.worker.priority import KEYED_SYNC
from processor.worker.task import (
    ClosedEpoch,
    Scanned,
    Task,
    TaskContext,
    Triggers,
    check,
    commit_metadata,
    committed_after_fencing,
    output_partitions,
    scan,
)

log = logging.getLogger(__name__)


class _Stateless:
    """The state backend of a source stage: it has no keyed operators, so no state."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [None] * len(keys)

    def write(self, items: Mapping[bytes, bytes | None]) -> None:
        assert not items, "a source stage has no state"


class SourceTask(Task):
    def __init__(self, ctx: TaskContext, index: int, partitions: list[int]) -> None:
        super().__init__(ctx)
        self.channel = index
        self.partitions = partitions
        stage = ctx.stage
        head = stage.source
        assert head is not None, f"stage {stage.name!r} reads no source"
        self._head = head
        self.topic = head.topic
        self._format = head.value_format
        s = ctx.settings
        self.chain = StageChain(
            ctx.graph.plan,
            stage,
            index,
            _Stateless(),
            {n.name: s.shuffle_partitions for n in stage.shuffles},
            s.max_key_bytes,
            ctx.graph.late_topic,
            s.combine,
            clients.record_limit(s),
        )
        # Downstream shuffles: (key_by name, topic, partitions, this task's channel in it).
        self._shuffles = self.shuffle_outputs()
        self._timed = head.timed
        self._kafka_times = head.timed and head.timestamp_fn is None
        self._meta = head.meta  # its pipeline uses record metadata: see `source_meta`
        self._watermarks = SourceWatermarks(partitions, head.out_of_orderness_ms, head.idle_ms)
        self._sent_mark: tuple[int, bool] | None = None  # the last watermark written
        self._triggers = Triggers()
        self._positions: dict[int, int] = {}  # input partition -> next offset to read
        self._committing: ClosedEpoch | None = None
        self._completed = 0  # the newest checkpoint completed, as the coordinator says
        self._m_in = metrics.records_in.labels(**self.labels)
        self._m_out = metrics.records_out.labels(**self.labels)
        skipped = metrics.records_skipped
        self._m_null = skipped.labels(**self.labels, reason="null")
        self._m_empty = skipped.labels(**self.labels, reason="empty")
        self._m_oversized = skipped.labels(**self.labels, reason="oversized_key")
        self._dlq = DeadLetters.of_task(s, ctx.task_id, self.labels)
        # Of a dead record derived from an input record: what the task knows of where.
        self._read_from = Position(self.topic, partitions[0] if len(partitions) == 1 else None)

    def request_checkpoint(
        self, checkpoint_id: int, triggered_at: float, drain: bool = False
    ) -> None:
        self._triggers.offer(checkpoint_id, triggered_at, drain)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        self._completed = max(self._completed, checkpoint_id)

    def _may_write_early(self) -> bool:
        """Whether the next epoch may go into the shuffles before its trigger: only once the
        checkpoint this task committed (or is committing) last has completed. Until then
        another source's barrier of it may still be on its way to a shuffle partition, and
        an open transaction of ours there would hide it from the keyed task (a read_committed
        reader stops at an open transaction's first record) until our commit, at the next
        trigger, which waits for that checkpoint: the stage would stall for the checkpoint
        timeout. Without shuffles (sinks only) there is no barrier to hide."""
        if not self._shuffles:
            return True
        newest = self._committing.checkpoint_id if self._committing else self.last_checkpoint
        return self._completed >= newest

    def run(self) -> None:
        s = self.settings
        out = open_output(s, self.transactional_id)
        consumer = clients.task_consumer(s)
        try:
            if self.postgres is not None:  # before the producer fences its predecessors
                self.postgres.read_fences(clients.cluster_id(consumer, self.topic))
            out.init()
            inputs = [TopicPartition(self.topic, p) for p in self.partitions]
            out.abort_leftovers(output_partitions(consumer, self.output_topics()), consumer, inputs)
            self._restore(consumer)
            self.state = "running"
            chain = self.chain
            timed = self._timed
            while not self.ctx.stop.is_set():
                # While a commit is in flight look again soon: its acknowledgement completes
                # the checkpoint.
                wait = 0.005 if self._committing is not None else 0.05
                KEYED_SYNC.step_aside()  # a keyed checkpoint step is on the output's path
                if chain.buffered >= s.flush_keys:
                    if self._may_write_early():
                        self._flush(out)
                    else:  # buffers full and no early write yet: read on once it may
                        self.ctx.stop.wait(0.002)
                if chain.buffered < s.flush_keys:
                    msgs = clients.consume_ready(consumer, s.consume_batch, wait)
                    if timed:
                        self._watermarks.polled(time.monotonic())
                    if msgs:
                        self._process(msgs, out)
                if self._committing is not None:
                    self._finish_commit(out, block=False)
                newest = self._committing.checkpoint_id if self._committing else 0
                requested = self._triggers.requested
                if requested > max(self.last_checkpoint, newest):
                    self._checkpoint(requested, out, consumer)
            self._stop_postgres(out)
        finally:
            out.close()
            consumer.close()
            if self.postgres is not None:
                self.postgres.close()

    def _restore(self, consumer: Consumer) -> None:
        topic = self.topic
        start = []
        wanted = [TopicPartition(topic, p) for p in self.partitions]
        for tp in committed_after_fencing(self.settings, wanted):
            if tp.offset >= 0:
                self._positions[tp.partition] = tp.offset
                meta = commit_metadata(tp)
                checkpoint = int(meta.get("checkpoint", 0))
                self.last_checkpoint = max(self.last_checkpoint, checkpoint)
                gaps.check_resume(
                    consumer, topic, tp.partition, tp.offset, checkpoint, gaps.INPUT_LOST
                )
            start.append(
                TopicPartition(
                    topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                )
            )
        if self.postgres is not None:  # its prepared transactions: what Kafka decided
            self.postgres.recover(self.last_checkpoint)
            if not self.last_checkpoint:  # and those of the job it started from
                after_savepoint(self.settings, self.ctx.graph, self.ctx.task_id, self.postgres)
        clients.assign(consumer, start)
        log.info(
            "%s: resuming %s at %s (checkpoint %d)",
            self.ctx.task_id,
            topic,
            self._positions or "the beginning",
            self.last_checkpoint,
        )

    def _process(self, msgs: list[Message], out: TransactionalOutput) -> None:
        scanned = scan(msgs, self._kafka_times, self._positions)
        if scanned is None:  # an event, an error or a record with no value in it
            scanned = self._scan_each(msgs)
        values, times, partitions = scanned
        self._records_in += len(msgs)
        self._m_in.inc(len(msgs))
        # The messages the decoded values came from (None: not worked out yet).
        kept: list[Message] | None = msgs if len(values) == len(msgs) else None
        if self._meta:
            read = source_meta.read(msgs, self._head)
            for msg, exc in read.refused:
                self._dlq.source_record(
                    out, msg, str(exc), exc.reason, self.chain.stage.head.name, exc
                )
            newest = self.chain.values(read.values, metas=read.metas)
            kept = read.kept
        else:
            decoded = self._decode(values, times)
            if decoded is None:  # a record in it is not for the pipeline: one at a time
                decoded, kept = self._decode_each(msgs, out, times)
            newest = self.chain.values(decoded, times=times)
        if newest is not None:
            for p in partitions:
                # One partition per task: the batch's newest event time is the partition's.
                self._watermarks.observe(p or 0, newest)
        if self.chain.has_dead:
            if kept is None:
                kept = [m for m in msgs if m.error() is None and m.value()]
            self._dead_letter(out, kept)

    def _scan_each(self, msgs: list[Message]) -> Scanned:
        """`scan`'s answer a message at a time: raises on a real error, skips events, and
        counts the records with no value."""
        values: list[bytes] = []
        positions = self._positions
        times: list[int] | None = [] if self._kafka_times else None
        for msg in msgs:
            if not check(msg):
                continue
            positions[msg.partition()] = msg.offset() + 1  # type: ignore[index,operator]
            value = msg.value()
            if value:
                values.append(value)
                if times is not None:
                    times.append(msg.timestamp()[1])
            elif value is None:
                self._m_null.inc()
            else:
                self._m_empty.inc()
        return values, times, {m.partition() for m in msgs}  # type: ignore[misc]

    def _decode(self, values: list[bytes], times: list[int] | None) -> list[object] | None:
        """The batch's values for the pipeline; None if one of them is not (see
        `processor.models.limits`): a C loop per check, the records one by one only then."""
        decoded: list[object]
        try:
            if self._format == "text":
                decoded = [v.decode() for v in values]
            elif self._format == "json":
                json_values = fastjson.loads_batch(values)  # as json.loads
                if json_values is None:
                    return None
                decoded = json_values
            elif self._format == "bytes":
                decoded = list(values)
            else:  # a serde (processor.serde): None if one fails, then record by record
                serde_decoded = loads_all(self._format, values)
                if serde_decoded is None:
                    return None
                decoded = serde_decoded
        except (ValueError, RecursionError):  # UnicodeDecodeError too
            return None
        if times is not None and not limits.in_range(times):
            return None
        return decoded

    def _decode_each(
        self, msgs: list[Message], out: TransactionalOutput, times: list[int] | None
    ) -> tuple[list[object], list[Message]]:
        """The slow path of a batch with a record the pipeline cannot take: dead-letter
        those (``times``, if given, is rebuilt for the ones kept). Returns the values and
        the messages they came from."""
        decoded: list[object] = []
        kept: list[Message] = []
        if times is not None:
            times.clear()
        for msg in msgs:
            raw = msg.value()
            if msg.error() is not None or not raw:
                continue
            ts = msg.timestamp()[1] if times is not None else 0
            try:
                if (
                    times is not None
                    and not -limits.EVENT_TIME_LIMIT < ts < limits.EVENT_TIME_LIMIT
                ):
                    raise RecordError(limits.event_time_error(ts), "bad_event_time")
                value = decode(self._format, raw)
            except RecordError as exc:
                self._dlq.source_record(out, msg, str(exc), exc.reason, self.chain.stage.head.name)
                continue
            decoded.append(value)
            kept.append(msg)
            if times is not None:
                times.append(ts)
        return decoded, kept

    def _dead_letter(self, out: TransactionalOutput, batch: list[Message] | None = None) -> None:
        """The chain's dead records into the DLQ; ``batch``: the messages of the values the
        chain was last given (a dead record that is one of them is written as it came)."""
        dead = self.chain.take_dead()
        origin = batch.__getitem__ if batch is not None else None
        self._dlq.failed(out, dead, origin, where=self._read_from)

    def _flush(self, out: TransactionalOutput) -> None:
        """The stage's buffers into the open transaction: combined partial aggregates (a few
        records per shuffle partition) and sink records."""
        outputs = [(name, channel) for name, _, _, channel in self._shuffles]
        drained = drain(self.chain, outputs)
        topics = [topic for _, topic, _, _ in self._shuffles]
        shipped = ship(out, segments_of(drained, topics, None))
        if drained.oversized:
            # A key this long would make records Kafka refuses (a task that can never
            # commit): skipped, counted.
            self._m_oversized.inc(drained.oversized)
        if drained.dead:
            self._dlq.failed(out, drained.dead, None, where=self._read_from)
        self._records_out += shipped
        self._m_out.inc(shipped)

    def _checkpoint(self, checkpoint_id: int, out: TransactionalOutput, consumer: Consumer) -> None:
        started = (time.monotonic(), time.thread_time())
        waited_before = out.take_waited()  # early flushes that waited for the last commit
        triggered_at = self._triggers.requested_at
        metrics.start_delay_seconds.labels(**self.labels).observe(
            max(0.0, time.time() - triggered_at)
        )
        if self._committing is not None:
            self._finish_commit(out, block=True)
        meta = json.dumps({"checkpoint": checkpoint_id})
        offsets = [
            TopicPartition(self.topic, p, off, metadata=meta)
            for p, off in sorted(self._positions.items())
        ]
        task_id = self.ctx.task_id
        if offsets:
            # The positions are final now: their round trips overlap the flush below.
            out.send_offsets_async(
                offsets, consumer, then=lambda: faults.reach("offsets_sent", task_id)
            )
        flush_started_cpu = time.thread_time()
        self._flush(out)
        if self.postgres is not None:
            self._prepare_rows(checkpoint_id, out)
        flush_cpu_s = time.thread_time() - flush_started_cpu
        if self._timed:
            self._send_watermark(out)
        for _, topic, partitions, channel in self._shuffles:
            value, headers = encode_barrier(
                Barrier(checkpoint_id, channel, int(triggered_at * 1000))
            )
            for p in range(partitions):
                out.produce(topic, value, partition=p, headers=headers)
        out.commit_async()
        self._dlq.tick()
        lag = self._lag(consumer)
        out.take_waited()  # within this step's time already
        self._committing = self._close_epoch(
            checkpoint_id,
            started,
            waited_before,
            flush_cpu_s,
            lag,
            {str(p): o for p, o in self._positions.items()},
        )

    def _stop_postgres(self, out: TransactionalOutput) -> None:
        """A clean stop: the commit in flight finished, the open transaction aborted, then no
        PostgreSQL transaction of the task stays prepared (`PostgresSinks.settle`)."""
        if self.postgres is None:
            return
        if self._committing is not None:
            self._finish_commit(out, block=True)
        out.abort()
        self.postgres.settle(self.last_checkpoint)

    def _prepare_rows(self, checkpoint_id: int, out: TransactionalOutput) -> None:
        """The epoch's PostgreSQL rows, prepared before Kafka transaction n commits; the rows
        the database refused into the DLQ, in that transaction."""
        assert self.postgres is not None
        written = self.postgres.prepare(checkpoint_id, self.chain, self.ctx.task_id)
        if self.chain.has_dead:
            self._dead_letter(out)
        self._records_out += written
        self._m_out.inc(written)

    def _send_watermark(self, out: TransactionalOutput) -> None:
        """This task's watermark (or idle mark) into every downstream shuffle partition, if
        it changed since the last one: after the epoch's records, before its barrier."""
        drained = self._triggers.draining
        for mark in source_marks(self._watermarks, self._sent_mark, drained=drained):
            self._write_mark(out, mark)

    def _write_mark(self, out: TransactionalOutput, mark: tuple[int, bool]) -> None:
        self._sent_mark = mark
        if not mark[1]:
            metrics.watermark_seconds.labels(**self.labels).set(mark[0] / 1000)
            lag = max(0.0, time.time() - mark[0] / 1000)
            metrics.event_time_lag_seconds.labels(**self.labels).set(lag)
        write_mark(out, [(t, n, channel) for _, t, n, channel in self._shuffles], mark)

    def _finish_commit(self, out: TransactionalOutput, block: bool) -> None:
        """Acknowledge the checkpoint whose commit is done (``block``: wait for it)."""
        commit_s = out.commit_finished(block)
        pending = self._committing
        if commit_s is None or pending is None:
            return
        self._committing = None
        faults.reach("committed", self.ctx.task_id)
        if self.postgres is not None:
            self.postgres.commit(pending.checkpoint_id, self.ctx.task_id)
        metrics.transaction_commit_seconds.labels(**self.labels).observe(commit_s)
        self.last_checkpoint = pending.checkpoint_id
        watermark = self._sent_mark[0] if self._sent_mark and not self._sent_mark[1] else None
        self.ctx.report(pending.ack(self.ctx, commit_s, watermark_ms=watermark))

    def _lag(self, consumer: Consumer) -> int:
        total = 0
        for p in self.partitions:
            tp = TopicPartition(self.topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=1, cached=True)
            if high < 0:
                low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            lag = max(0, high - self._positions.get(p, low))
            metrics.consumer_lag.labels(**self.labels, partition=str(p)).set(lag)
            total += lag
        return total
