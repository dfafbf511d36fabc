"""Job definitions: a job is a small declaration, the engine runs every job the same way.

The graph has two stages joined by a hash-partitioned shuffle topic:

    input --[source stage: lines -> keys]--> <job>.shuffle --[keyed stage: exact count]--> output

The source stage runs one task per input partition, the keyed stage one task per shuffle
partition. A job only says how a batch of input lines becomes keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class KeyedCountJob:
    name: str
    # A batch of input lines -> the keys they contain; every key occurrence counts 1.
    # Batched so that a job can run one regex over many lines instead of one per line.
    extract: Callable[[list[str]], Iterable[str]]
    source_stage: str = "split"
    keyed_stage: str = "count"


@dataclass(frozen=True)
class TaskId:
    stage: str
    index: int

    def __str__(self) -> str:
        return f"{self.stage}-{self.index}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        stage, _, index = text.rpartition("-")
        return cls(stage, int(index))


def task_ids(job: KeyedCountJob, input_partitions: int, shuffle_partitions: int) -> list[str]:
    return [str(TaskId(job.source_stage, i)) for i in range(input_partitions)] + [
        str(TaskId(job.keyed_stage, i)) for i in range(shuffle_partitions)
    ]
