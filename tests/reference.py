"""The output the engine must give for an input, in the form the integration and chaos tests
compare committed Kafka records with: `processor.testing.Driver` (the engine's own stage code,
in memory, without failures) run over the input, its sinks' records as bytes.

A sink fed by an aggregation is a *changelog*, whose updates depend on where checkpoints fall:
compare its final value per key (`SinkOutput.final`). A sink fed only by ``emit="record"``
aggregations gets every update (`SinkOutput.updates`): compare each key's full sequence
(`SinkOutput.sequences`). Compare any other sink's records as a multiset (windows, joins and
``process`` included, as long as no record is late).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from processor import testing
from processor.api.node import AggregationNode, Node
from processor.api.streams import Pipeline

SinkRecord = tuple[bytes | None, bytes]


@dataclass
class SinkOutput:
    changelog: bool
    records: list[SinkRecord] = field(default_factory=list)
    # A changelog of every update (only emit="record" aggregations upstream): the engine
    # emits each of them as well, not only the latest per checkpoint.
    updates: bool = False

    def final(self) -> dict[bytes | None, bytes]:
        """The last value per key."""
        return dict(self.records)

    def sequences(self) -> dict[bytes | None, list[bytes]]:
        """Every value per key, in order. The engine's order per key is the same where each
        key's records reach the aggregation in input order (one source partition per key,
        one shuffle on the way) or where the updates do not depend on it (a count's)."""
        out: dict[bytes | None, list[bytes]] = {}
        for key, value in self.records:
            out.setdefault(key, []).append(value)
        return out

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
    sinks = {}
    for node in pipeline.sinks:
        sinks[node.topic] = output = _output(node)
        output.records = driver.raw_output(node.topic)
    return Result(sinks, [(d.operator, d.error) for d in driver.dead_records()])


def _output(sink: Node) -> SinkOutput:
    """A changelog if an aggregation is upstream (on any path, through merges); of every
    update if all of them emit per record."""
    aggregations: list[AggregationNode] = []
    stack: list[Node] = [sink]
    while stack:
        node = stack.pop()
        if isinstance(node, AggregationNode) and node.aggregated:
            aggregations.append(node)
        stack.extend(node.inputs)
    changelog = bool(aggregations)
    return SinkOutput(changelog, updates=changelog and all(n.per_record for n in aggregations))
