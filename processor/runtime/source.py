"""Source task: reads user input partitions, maps lines to keys, writes the shuffle.

Sources have no alignment to do: the coordinator's trigger *is* their barrier. At trigger n
a source flushes its combiner, writes barrier n into every shuffle partition and commits
one transaction holding the epoch's shuffle records, the barriers and its input offsets.
The commit's round trips run in the background while the source reads and combines epoch n+1
(whose records only go out at trigger n+1, or earlier if the combiner outgrows
``flush_keys``: that write waits for commit n).

Pre-aggregation (the combiner) is exact: partial counts of one epoch are committed together
with the input offsets they cover, so a replay recomputes exactly the same partial counts.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from processor import faults, metrics
from processor.kafka import clients
from processor.kafka.output import TransactionalOutput
from processor.models.records import Barrier, encode_barrier, encode_counts, shuffle_partition
from processor.runtime import gaps
from processor.runtime.task import (
    ClosedEpoch,
    Task,
    TaskContext,
    check,
    commit_metadata,
    committed_after_fencing,
)

log = logging.getLogger(__name__)


class SourceTask(Task):
    def __init__(self, ctx: TaskContext, index: int, partitions: list[int]) -> None:
        super().__init__(ctx)
        self.channel = index
        self.partitions = partitions
        self._requested = 0
        self._requested_at = 0.0  # wall-clock time the coordinator triggered it
        self._combiner: Counter[str] = Counter()
        self._positions: dict[int, int] = {}  # input partition -> next offset to read
        self._committing: ClosedEpoch | None = None
        s = ctx.settings
        self._m_in = metrics.records_in.labels(**self.labels)
        self._m_out = metrics.records_out.labels(**self.labels)
        self._m_null = metrics.records_skipped.labels(**self.labels, reason="null")
        self._m_empty = metrics.records_skipped.labels(**self.labels, reason="empty")
        self._m_utf8 = metrics.records_skipped.labels(**self.labels, reason="non_utf8")
        self._m_oversized = metrics.records_skipped.labels(**self.labels, reason="oversized_key")
        self._shuffle_partitions = s.shuffle_partitions
        # key -> its shuffle partition (-1: too long to ship). A vocabulary repeats from
        # epoch to epoch; the cache saves encoding and hashing every key at every flush.
        self._partition_of: dict[str, int] = {}

    def request_checkpoint(self, checkpoint_id: int, triggered_at: float) -> None:
        # Only the newest trigger matters (older ones are superseded). The time goes first:
        # the task thread reads _requested, then _requested_at.
        if checkpoint_id > self._requested:
            self._requested_at = triggered_at
            self._requested = checkpoint_id

    def run(self) -> None:
        s = self.settings
        out = TransactionalOutput(s, self.transactional_id)
        consumer = clients.task_consumer(s)
        try:
            out.init()
            self._restore(consumer)
            self.state = "running"
            extract = self.ctx.job.extract
            while not self.ctx.stop.is_set():
                # While a commit is in flight look again soon: its acknowledgement completes
                # the checkpoint.
                wait = 0.005 if self._committing is not None else 0.05
                msgs = clients.consume_ready(consumer, s.consume_batch, wait)
                if msgs:
                    self._process(msgs, extract, out)
                    if len(self._combiner) >= s.flush_keys:
                        self._flush(out)
                if self._committing is not None:
                    self._finish_commit(out, block=False)
                newest = self._committing.checkpoint_id if self._committing else 0
                if self._requested > max(self.last_checkpoint, newest):
                    self._checkpoint(self._requested, out, consumer)
        finally:
            out.close()
            consumer.close()

    def _restore(self, consumer: Consumer) -> None:
        topic = self.settings.input_topic
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
        consumer.assign(start)
        log.info(
            "%s: resuming %s at %s (checkpoint %d)",
            self.ctx.task_id,
            topic,
            self._positions or "the beginning",
            self.last_checkpoint,
        )

    def _process(self, msgs: list[Message], extract: object, out: TransactionalOutput) -> None:
        values: list[bytes] = []
        positions = self._positions
        for msg in msgs:
            if not check(msg):
                continue
            positions[msg.partition()] = msg.offset() + 1  # type: ignore[index,operator]
            value = msg.value()
            if value:
                values.append(value)
            elif value is None:
                self._m_null.inc()
            else:
                self._m_empty.inc()
        self._records_in += len(msgs)
        self._m_in.inc(len(msgs))
        try:
            lines = [v.decode() for v in values]
        except UnicodeDecodeError:
            lines = self._decode_each(msgs, out)
        self._combiner.update(self.ctx.job.extract(lines))

    def _decode_each(self, msgs: list[Message], out: TransactionalOutput) -> list[str]:
        """The slow path of a batch with a non-UTF-8 record: dead-letter the bad ones."""
        lines = []
        for msg in msgs:
            value = msg.value()
            if msg.error() is not None or not value:
                continue
            try:
                lines.append(value.decode())
            except UnicodeDecodeError as exc:
                self._m_utf8.inc()
                out.produce(
                    self.settings.dlq_topic,
                    value,
                    key=msg.key(),
                    headers=[
                        ("source.topic", (msg.topic() or "").encode()),
                        ("source.partition", str(msg.partition()).encode()),
                        ("source.offset", str(msg.offset()).encode()),
                        ("error", f"not UTF-8: {exc.reason} at byte {exc.start}".encode()),
                    ],
                )
        return lines

    def _flush(self, out: TransactionalOutput) -> None:
        """The combiner's partial counts into the shuffle: a few records per partition."""
        combiner = self._combiner
        if not combiner:
            return
        partitions = self._shuffle_partitions
        parts: list[dict[str, int]] = [{} for _ in range(partitions)]
        partition_of = self._partition_of
        if len(partition_of) > _PARTITION_CACHE_LIMIT:
            partition_of.clear()
        for key, n in combiner.items():
            p = partition_of.get(key)
            if p is None:
                p = partition_of[key] = self._partition(key)
            if p >= 0:
                parts[p][key] = n
            else:
                # A key this long would make records Kafka refuses (a task that can never
                # commit): skip it, counted, and keep the rest of its line.
                self._m_oversized.inc(n)
        channel = self.channel
        topic = self.settings.shuffle_topic
        shipped = 0
        for p, counts in enumerate(parts):
            if counts:
                for value in _encode_within(channel, counts, _MAX_RECORD_BYTES):
                    out.produce(topic, value, partition=p)
                shipped += len(counts)
        self._records_out += shipped
        self._m_out.inc(shipped)
        combiner.clear()

    def _partition(self, key: str) -> int:
        raw = key.encode()
        if len(raw) > self.settings.max_key_bytes:
            return -1
        return shuffle_partition(raw, self._shuffle_partitions)

    def _checkpoint(self, checkpoint_id: int, out: TransactionalOutput, consumer: Consumer) -> None:
        s = self.settings
        started = (time.monotonic(), time.thread_time())
        waited_before = out.take_waited()  # early flushes that waited for the last commit
        triggered_at = self._requested_at
        metrics.start_delay_seconds.labels(**self.labels).observe(
            max(0.0, time.time() - triggered_at)
        )
        if self._committing is not None:
            self._finish_commit(out, block=True)
        meta = json.dumps({"checkpoint": checkpoint_id})
        offsets = [
            TopicPartition(s.input_topic, p, off, metadata=meta)
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
        flush_cpu_s = time.thread_time() - flush_started_cpu
        value, headers = encode_barrier(
            Barrier(checkpoint_id, self.channel, int(triggered_at * 1000))
        )
        for p in range(self._shuffle_partitions):
            out.produce(s.shuffle_topic, value, partition=p, headers=headers)
        out.commit_async()
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

    def _finish_commit(self, out: TransactionalOutput, block: bool) -> None:
        """Acknowledge the checkpoint whose commit is done (``block``: wait for it)."""
        commit_s = out.commit_finished(block)
        pending = self._committing
        if commit_s is None or pending is None:
            return
        self._committing = None
        faults.reach("committed", self.ctx.task_id)
        metrics.transaction_commit_seconds.labels(**self.labels).observe(commit_s)
        self.last_checkpoint = pending.checkpoint_id
        self.ctx.report(pending.ack(self.ctx, commit_s))

    def _lag(self, consumer: Consumer) -> int:
        total = 0
        for p in self.partitions:
            tp = TopicPartition(self.settings.input_topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=1, cached=True)
            if high < 0:
                low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            lag = max(0, high - self._positions.get(p, low))
            metrics.consumer_lag.labels(**self.labels, partition=str(p)).set(lag)
            total += lag
        return total


# Well below Kafka's default 1 MB record limit (message.max.bytes), also after the broker's
# batch overhead; a flush of many keys is spread over several records.
_MAX_RECORD_BYTES = 512 * 1024
_PARTITION_CACHE_LIMIT = 1_000_000


def _encode_within(channel: int, counts: dict[str, int], limit: int) -> list[bytes]:
    """``counts`` as shuffle record values of at most about ``limit`` bytes each."""
    value = encode_counts(channel, counts)
    if len(value) <= limit or len(counts) == 1:
        return [value]
    items = list(counts.items())
    half = len(items) // 2
    return _encode_within(channel, dict(items[:half]), limit) + _encode_within(
        channel, dict(items[half:]), limit
    )
