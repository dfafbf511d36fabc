"""The end of an epoch (or an early flush): what a stage's chain hands out, in one place.

Both task kinds (`processor.worker.source`, `processor.worker.keyed`) and the test driver
(`processor.testing`) drain a chain with `drain`, so a record leaves the chain by the same
path in a test as in a worker: the aggregations flushed (unless only output is drained),
then the sink records, the records with headers, each shuffle's buffer for the task's
channel, the loop's feedback, the keys too long to ship (counted), and the dead records
last (a flush can make some). Where it all goes (a Kafka transaction, the driver's lists)
is the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processor.api.sinks import Headed
    from processor.engine.chain import StageChain
    from processor.engine.dead import DeadRecord

# A shuffle's records for its downstream tasks: (partition, record value).
Shuffled = list[tuple[int, bytes]]


@dataclass
class Drained:
    """What `drain` took from a chain."""

    sinks: dict[str, list[tuple[bytes | None, bytes]]] = field(default_factory=dict)
    headed: dict[str, list[Headed]] = field(default_factory=dict)
    shuffled: list[Shuffled] = field(default_factory=list)  # one per output asked for
    fed_back: Shuffled = field(default_factory=list)
    oversized: int = 0  # shuffle records skipped: a key too long for Kafka
    dead: list[DeadRecord] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Records for Kafka (sinks, headed, shuffles and feedback), dead ones not counted."""
        return (
            sum(len(r) for r in self.sinks.values())
            + sum(len(r) for r in self.headed.values())
            + sum(len(s) for s in self.shuffled)
            + len(self.fed_back)
        )


def drain(
    chain: StageChain,
    outputs: Sequence[tuple[str, int]] = (),
    feedback: tuple[str, int] | None = None,
    operators: bool = True,
) -> Drained:
    """Flush ``chain`` (``operators`` False: take the output buffered so far and leave the
    operators' state alone) and take everything it buffered. ``outputs``: the task's
    shuffles, ``(shuffle name, the task's channel)``; ``feedback``: the loop's shuffle
    name and the task's channel in it."""
    if operators:
        chain.flush()
    drained = Drained(chain.take_sinks(), chain.take_headed())
    for name, channel in outputs:
        shuffle = chain.shuffles[name]
        drained.shuffled.append(shuffle.take(channel))
        drained.oversized += shuffle.oversized
        shuffle.oversized = 0
    if feedback is not None:
        name, channel = feedback
        drained.fed_back = chain.shuffles[name].take(channel)
    if chain.has_dead:
        drained.dead = chain.take_dead()
    return drained
