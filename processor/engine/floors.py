"""Lateness floors: the watermarks a job started from a savepoint inherits, per key.

A window the old job emitted is gone from the savepoint's state; a record for it that comes
in the new job (read again after the savepoint's positions, or new) was late in the old job and
must stay late there, or it opens the window again and ``key@start`` is emitted a second time
with a partial count. The new job's own watermarks start from nothing, so each keyed task
inherits, per key, the watermark the old task that owned the key had reached at the
savepoint's checkpoint: a record is late if its window closed under the higher of the task's
watermark and that floor. The old owner is the old partition of the key (CRC-32 of its text
modulo the old partition count, as the shuffle routes it), so a savepoint restored with another
partition count keeps each key's own floor: no record that was on time in the old job becomes
late, and none that was late becomes on time. A join's records are late below the same floor.

Only the lateness test uses floors: a task forwards its own watermark downstream, which may
be below what the old job forwarded. That only delays the downstream windows' closing: every
timed stage inherits floors of its own from its own old tasks, so none reopens a window.

A *layer* is the old stage's watermarks, one per old partition; a job started from a savepoint
of a job that was itself still below its inherited floors carries those layers on too. Floors
only matter until the task's own watermark passes the highest of them; then they are dropped
and lateness costs nothing more. Until then they are part of each snapshot's metadata.

Pure: no Kafka, no state.
"""

from __future__ import annotations

import zlib
from typing import Any

from processor.engine.time import NO_WATERMARK


class Floors:
    """Per-key lower bounds on the watermark, from one or more layers."""

    def __init__(self, layers: list[list[int]]) -> None:
        self.layers = [list(layer) for layer in layers if layer]
        self.highest = max((max(layer) for layer in self.layers), default=NO_WATERMARK)
        self._one = self.layers[0] if len(self.layers) == 1 else None

    def of(self, text: str) -> int:
        """The floor of the key whose text is ``text``."""
        h = zlib.crc32(text.encode())
        one = self._one
        if one is not None:
            return one[h % len(one)]
        return max(layer[h % len(layer)] for layer in self.layers)

    def to_json(self) -> list[list[int]]:
        return self.layers

    @classmethod
    def from_json(cls, doc: Any) -> Floors | None:
        """From `to_json`; None when there is nothing above no watermark at all."""
        if not isinstance(doc, list):
            return None
        try:
            layers = [[int(mark) for mark in layer] for layer in doc]
        except (TypeError, ValueError):
            return None
        floors = cls(layers)
        return floors if floors.highest > NO_WATERMARK else None
