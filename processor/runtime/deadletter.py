"""Records the pipeline cannot handle go to ``<job>.dlq``, inside the task's transaction.

Inside it, so that a dead record is written exactly once, like the output it is missing from.
Headers say where it came from and why: for undecodable input the source record's topic,
partition and offset (the value is the record as it was); for a record that a user function
or the encoding refused, the operator and the error (the value is a short repr of it).
"""

from __future__ import annotations

from processor.kafka.output import TransactionalOutput
from processor.pipeline.chain import DeadRecord


def undecodable(
    out: TransactionalOutput,
    dlq: str,
    value: bytes,
    key: bytes | None,
    where: tuple[str, int, int],
    error: str,
) -> None:
    topic, partition, offset = where
    out.produce(
        dlq,
        value,
        key=key,
        headers=[
            ("source.topic", topic.encode()),
            ("source.partition", str(partition).encode()),
            ("source.offset", str(offset).encode()),
            ("error", error.encode()),
        ],
    )


def failed(out: TransactionalOutput, dlq: str, task: str, dead: list[DeadRecord]) -> None:
    for record in dead:
        out.produce(
            dlq,
            record.value.encode(),
            headers=[
                ("task", task.encode()),
                ("operator", record.operator.encode()),
                ("error", record.error.encode()),
            ],
        )
