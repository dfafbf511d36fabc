"""A task must never resume past records it has not processed: detect them deleted, and stop.

Retention (or ``delete_records``) can remove records a task's committed position still needs:
the input of a source that was stopped for longer than the input's retention, or shuffle
records behind a keyed task's checkpoint. Skipping them (``auto.offset.reset=earliest``)
would silently give wrong counts; a restart cannot bring them back, so restarting in a loop
only hides the problem. The task stops for good with one line naming the gap instead
(``PermanentTaskFailure``), and the rest of the job keeps running.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from processor.errors import PermanentTaskFailure

# What the deleted records mean for each kind of task.
STATE_LOST = "the state cannot be rebuilt exactly"
INPUT_LOST = "they can never be processed"


class RecordsDeleted(PermanentTaskFailure):
    """Records below the log start of a partition were still needed by the task."""

    reason = "records_deleted"


def describe_gap(
    topic: str, partition: int, log_start: int, resume: int, checkpoint: int, consequence: str
) -> str | None:
    """The one line naming the gap, or None when every record from ``resume`` on is there."""
    if log_start <= resume:
        return None
    where = (
        f"checkpoint {checkpoint} resumes at {resume}"
        if checkpoint
        else f"the task (no checkpoint yet) starts at {resume}"
    )
    return (
        f"{topic}[{partition}] starts at {log_start} but {where}: records {resume}-"
        f"{log_start - 1} were deleted (retention?); {consequence}"
    )


def check_resume(
    consumer: Consumer,
    topic: str,
    partition: int,
    resume: int,
    checkpoint: int,
    consequence: str,
    timeout: float = 30,
) -> None:
    """Raise RecordsDeleted when the partition's log start is above ``resume``.

    Asked of the broker (not cached): the check runs once per restore, and a stale low
    watermark would let the consumer hit the gap later, as a less clear error.
    """
    low, _ = consumer.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=timeout, cached=False
    )
    line = describe_gap(topic, partition, low, resume, checkpoint, consequence)
    if line is not None:
        raise RecordsDeleted(line)
