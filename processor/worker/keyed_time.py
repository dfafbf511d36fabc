"""A keyed task's event time: the watermarks of its channels in, the watermark it forwards
downstream out, and both kept in its snapshots (timed stages only)."""

from __future__ import annotations

from typing import Any

from processor.engine.chain import StageChain
from processor.engine.floors import Floors
from processor.engine.time import NO_WATERMARK, ChannelWatermarks, Mark, keyed_mark


class TaskTime:
    """``watermarks``: the channels'; ``sent``: the last mark forwarded, which is what
    downstream has once the open transaction commits."""

    def __init__(self, channels: int) -> None:
        self.watermarks = ChannelWatermarks(channels)
        self.sent: Mark | None = None

    def restore(self, chain: StageChain, meta: dict[str, Any]) -> None:
        """The channels' watermarks, the mark forwarded and the lateness floors a snapshot
        (or a savepoint's load) holds."""
        marks = meta.get("watermarks")
        if isinstance(marks, dict):
            self.watermarks.restore(marks)
        chain.watermark = self.watermarks.current
        self.sent = _restored_mark(meta.get("sent_watermark"))
        if self.sent is None and self.watermarks.current > NO_WATERMARK:
            # A snapshot of an older version, which did not record it.
            self.sent = (self.watermarks.current, False)
        chain.inherit(Floors.from_json(meta.get("floors")))

    def next_mark(self, chain: StageChain) -> Mark | None:
        """The mark to forward now (then remembered as sent), or None if there is none yet
        or it did not change. Held back to what the stage's windows may still emit
        (`StageChain.output_watermark`); idle when every channel is idle."""
        mark = keyed_mark(chain.output_watermark, self.watermarks.all_idle, self.sent)
        if mark is not None:
            self.sent = mark
        return mark

    def snapshot_meta(self, chain: StageChain) -> dict[str, Any]:
        """What a snapshot keeps of it, with the lateness floors inherited from a
        savepoint until the watermark passes them."""
        floors = chain.floors
        sent = None if self.sent is None else list(self.sent)
        return {
            "watermarks": self.watermarks.snapshot(),
            "sent_watermark": sent,
            **({"floors": floors.to_json()} if floors is not None else {}),
        }


def _restored_mark(raw: Any) -> Mark | None:
    """The forwarded watermark a snapshot recorded (``[time, idle]``), if any."""
    if isinstance(raw, list) and len(raw) == 2 and type(raw[0]) is int:
        return (raw[0], bool(raw[1]))
    return None
