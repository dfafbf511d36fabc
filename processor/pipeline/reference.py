"""The output the engine must give for an input, in the form the integration and chaos tests
compare committed Kafka records with: `processor.testing.Driver` (the engine's own stage code,
in memory, without failures) run over the input, its sinks' records as bytes.

A sink fed by an aggregation is a *changelog*, whose updates depend on where checkpoints fall:
compare its final value per key (`SinkOutput.final`); compare any other sink's records as a
multiset (windows, joins and ``process`` included, as long as no record is late).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from processor import testing
from processor.pipeline.api import Node, Pipeline

SinkRecord = tuple[bytes | None, bytes]


@dataclass
class SinkOutput:
    changelog: bool
    records: list[SinkRecord] = field(default_factory=list)

    def final(self) -> dict[bytes | None, bytes]:
        """The last value per key."""
        return dict(self.records)

    def multiset(self) -> Counter[SinkRecord]:
        return Counter(self.records)


@dataclass
class Result:
    sinks: dict[str, SinkOutput]
    dead: list[tuple[str, str]]  # (operator, error) of each record that went to the DLQ


def run(
    pipeline: Pipeline,
    inputs: Mapping[str, Iterable[bytes | None]],
    checkpoint_every: int = 1000,
) -> Result:
    """Every source topic's records (in order, Kafka timestamps their index) through the
    pipeline by `processor.testing.Driver`, to the end of time (every window closes)."""
    driver = testing.Driver(pipeline, checkpoint_every=checkpoint_every)
    driver.send_all(inputs)
    driver.finish()
    sinks = {n.topic: SinkOutput(_changelog(n), driver.raw_output(n.topic)) for n in pipeline.sinks}
    return Result(sinks, [(d.operator, d.error) for d in driver.dead_records()])


def _changelog(sink: Node) -> bool:
    """Whether an aggregation is upstream of ``sink`` (on any path, through merges)."""
    stack = [sink]
    while stack:
        node = stack.pop()
        if node.aggregated:
            return True
        stack.extend(node.inputs)
    return False
