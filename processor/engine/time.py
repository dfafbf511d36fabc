"""Watermarks: how far event time has progressed, at a source and at a task with channels.

A watermark W says "no record with an event time below W will come any more". Records below
the watermark that do come are *late*: windows and joins write them to ``<job>.late``.

- A source task's watermark is, over its partitions, the minimum of (highest timestamp seen
  minus ``out_of_orderness_ms``); a partition with no record for ``idle_ms`` of wall time
  spent reading it does not hold it back, and a task whose partitions are all idle says so
  (an *idle* mark), after the watermark of what it read before (an idle mark's time is
  ignored).
- A keyed task's watermark is the minimum over its input channels' latest watermarks,
  ignoring idle channels. It never goes back. A channel that has sent no watermark yet holds
  it back (until its task sends one, or an idle mark).

Watermarks are control records written into the shuffle after the records of the same flush
and before the barrier, so a channel's watermark sits at a fixed place in the log: a replay
sees the same ones at the same places. The per-channel watermarks a keyed task has seen are
part of its snapshot, taken at the barrier, so a restored task decides lateness exactly as
the first run did. Sources need no such state: what they send is only ever a new, higher
bound, and a keyed task ignores a channel's watermark that would go back.

Pure: no Kafka, no clock (the caller passes the time).
"""

from __future__ import annotations

from typing import Any

# No watermark yet: below every event time.
NO_WATERMARK = -(1 << 62)
# The watermark of a drained job (``processor local --until-idle --drain``, as Flink's
# ``stop --drain`` and its bounded sources end): every window and event-time timer fires. The
# last millisecond a datetime can show (9999-12-31T23:59:59.999Z), so that the status page and
# the metrics can still show it.
END_OF_TIME = 253_402_300_799_999
# Of the wall time between two reads of a source task, what counts towards idleness at most:
# more than a read and its batch take, less than any sensible idle_ms.
READ_GAP_S = 0.25


class SourceWatermarks:
    """A source task's watermark over its partitions.

    A partition is idle after ``idle_ms`` spent *reading* it without a record: time the task
    was not reading (restoring, waiting for a commit, stopped, starved of CPU) is no sign
    that the partition has nothing, and counting it would mark idle a partition whose records
    are waiting, and make them late downstream when it is read again. The task reports each
    read (`polled`); of the time between two reads at most `READ_GAP_S` counts.
    """

    def __init__(self, partitions: list[int], out_of_orderness_ms: int, idle_ms: int) -> None:
        self._bound = out_of_orderness_ms
        self._idle_s = idle_ms / 1000
        self._max: dict[int, int] = {}  # partition -> highest event time seen
        # partition -> seconds spent reading since its last record
        self._quiet = dict.fromkeys(partitions, 0.0)
        self._read_at: float | None = None  # the last read's wall time (None: no read yet)

    def polled(self, now: float) -> None:
        """The task read its partitions at ``now`` (whether records came or not)."""
        if self._read_at is not None:
            step = min(now - self._read_at, READ_GAP_S)
            for p in self._quiet:
                self._quiet[p] += step
        self._read_at = now

    def observe(self, partition: int, max_time_ms: int) -> None:
        """Records of ``partition`` up to ``max_time_ms`` were read."""
        if max_time_ms > self._max.get(partition, NO_WATERMARK):
            self._max[partition] = max_time_ms
        self._quiet[partition] = 0.0

    def progress(self) -> int:
        """The watermark as if no partition were idle: what the records read so far allow."""
        return min(self._max.get(p, NO_WATERMARK) for p in self._quiet) - self._bound

    def current(self) -> int | None:
        """The watermark, or None if every partition is idle."""
        active = [p for p, quiet in self._quiet.items() if quiet < self._idle_s]
        if not active:
            return None
        return min(self._max.get(p, NO_WATERMARK) for p in active) - self._bound


class ChannelWatermarks:
    """A task's watermark over its input channels (see the module's docstring)."""

    def __init__(self, channels: int) -> None:
        self._marks: list[int] = [NO_WATERMARK] * channels
        self._idle: list[bool] = [False] * channels
        self.current = NO_WATERMARK

    def on_mark(self, channel: int, time_ms: int, idle: bool) -> int | None:
        """A watermark (or idle mark) of ``channel``; the task's new watermark if it rose.

        An idle mark's time still bounds what the channel sent before it: it counts as a
        watermark of the channel before the channel goes idle (a task whose channels all
        went idle in one epoch forwards one idle mark for both, and otherwise the progress
        it carries would be lost downstream)."""
        risen = None
        if time_ms > self._marks[channel]:
            self._marks[channel] = time_ms
            self._idle[channel] = False
            risen = self._recompute()
        self._idle[channel] = idle
        again = self._recompute()
        return risen if again is None else again

    def _recompute(self) -> int | None:
        active = [m for m, idle in zip(self._marks, self._idle, strict=True) if not idle]
        if not active:
            return None  # every channel idle: nothing holds it back, nothing moves it either
        low = min(active)
        if low > self.current:
            self.current = low
            return low
        return None

    @property
    def all_idle(self) -> bool:
        return all(self._idle)

    def snapshot(self) -> dict[str, Any]:
        """For the snapshot's metadata: JSON."""
        return {"channels": list(self._marks), "idle": list(self._idle), "current": self.current}

    def restore(self, meta: dict[str, Any]) -> None:
        """From ``snapshot()``; a snapshot without watermarks starts from none."""
        marks, idle = meta.get("channels"), meta.get("idle")
        if isinstance(marks, list) and len(marks) == len(self._marks):
            self._marks = [int(m) for m in marks]
        if isinstance(idle, list) and len(idle) == len(self._idle):
            self._idle = [bool(i) for i in idle]
        self.current = int(meta.get("current", NO_WATERMARK))


# A watermark as a task forwards it downstream: (time, idle). An idle mark's time is ignored.
Mark = tuple[int, bool]


def source_marks(
    watermarks: SourceWatermarks,
    sent: Mark | None,
    floor: int = NO_WATERMARK,
    drained: bool = False,
) -> list[Mark]:
    """The marks a source task forwards now, in order, after ``sent`` (none if nothing
    changed). Idle, it first forwards the watermark of what it read before (readers ignore
    an idle mark's time, and the records read since the last mark would never close their
    windows). ``floor``: a watermark the caller forces (the test driver's). ``drained``: the
    input is done, event time ends (`END_OF_TIME`, not idle: it closes every window)."""
    if drained:
        end = (END_OF_TIME, False)
        return [] if sent == end else [end]
    current = watermarks.current()
    marks: list[Mark] = []
    last = (sent or (NO_WATERMARK, True))[0]
    if current is None:  # idle
        progress = watermarks.progress()
        if progress > max(last, NO_WATERMARK // 2):
            marks.append((progress, False))
            last = progress
        mark = (last, True)
    else:
        current = max(current, floor)
        if current <= NO_WATERMARK // 2:
            return []  # a partition has had no record yet: nothing to say
        mark = (current, False)
    if mark != (marks[-1] if marks else sent):
        marks.append(mark)
    return marks


def keyed_mark(output_watermark: int, all_idle: bool, sent: Mark | None) -> Mark | None:
    """The mark a keyed task forwards now, or None if there is none yet or it did not
    change: its output watermark (held back to what its windows may still emit,
    `StageChain.output_watermark`), idle when every channel is."""
    if output_watermark <= NO_WATERMARK and not all_idle:
        return None
    mark = (output_watermark, all_idle)
    return None if mark == sent else mark
