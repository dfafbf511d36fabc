"""The steady-state window's edges, from the committed input progress alone (pure, no Kafka).

A run's figure is the slope of the words before the group's committed input offsets. Two
things make a flat stretch of those samples something other than a rate of 0:

* the input ran out, and the system committed its last offsets late. Flink's KafkaSource
  commits offsets from its split fetcher thread, which runs the commit only after its
  current ``KafkaConsumer.poll`` returns; with the input drained that poll waits out its 10 s
  timeout (``KafkaPartitionSplitReader.POLL_TIMEOUT``; ``SplitFetcher.enqueueTask`` does not
  wake it). So a Flink job that has read everything keeps the offsets of an earlier
  checkpoint committed for up to 10 s, then jumps to the end. Such a plateau is a commit
  delay, not throughput: it is cut from the slope when the system's CPU over it was idle;
* the system stopped (a stuck checkpoint, a restart loop): no progress while the backlog
  remains. After ``stall_s`` of it the run ends, not ok.

Both are waited for past the planned end of the window: a run whose samples are flat then
(for ``pause_s`` or more) goes on until they move again, reach the end of the input or stall.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Committed words at or above this share of the input: the input is exhausted (a run stops).
EXHAUSTED = 0.98
# Samples at or above this share: the end of the input, a plateau (never in a slope).
END = 0.999
# A system's process tree below this many cores over a plateau: idle, done with its input.
IDLE_CORES = 0.3

Sample = tuple[float, float]  # (wall time, committed input words)


def flat_for(samples: Sequence[Sample], now: float) -> float:
    """Seconds since the committed words last changed: ``now`` minus the time of the first
    sample with the latest value (0 without samples)."""
    if not samples:
        return 0.0
    last = samples[-1][1]
    since = samples[-1][0]
    for t, w in reversed(samples):
        if w != last:
            break
        since = t
    return now - since


def window_over(
    now: float,
    planned_end: float,
    samples: Sequence[Sample],
    total: int,
    pause_s: float,
    stall_s: float,
) -> str | None:
    """Why the run's window ends now, or None to go on: ``exhausted`` (the committed words
    reached ``EXHAUSTED`` of the input), ``stalled`` (no progress for ``stall_s`` below it),
    ``window`` (the planned end passed and the samples are not flat for ``pause_s``: a flat
    tail is waited out, since it may be the input's end committed late)."""
    latest = samples[-1][1] if samples else 0.0
    if latest >= EXHAUSTED * total:
        return "exhausted"
    flat = flat_for(samples, now)
    if flat >= stall_s:
        return "stalled"
    if now >= planned_end and flat < pause_s:
        return "window"
    return None


@dataclass(frozen=True)
class Span:
    """The samples a run's slope is taken over, and how they were chosen."""

    samples: list[Sample]
    exhausted: bool  # the committed words reached the end of the input
    warmup_cut_short: bool  # too few samples in the window: measured from the first progress
    # A flat stretch just before the end of the input: (its first sample, the sample at the
    # end), and whether the system was idle over it (then it is not in ``samples``).
    plateau: tuple[float, float] | None = None
    plateau_idle: bool | None = None


def measured_span(
    samples: Sequence[Sample],
    total: int,
    window: tuple[float, float],
    first_at: float,
    pause_s: float,
    idle: Callable[[float, float], bool],
) -> Span:
    """The samples of ``window`` (start, end) the slope is taken over. Samples at the end of
    the input are left out (a plateau, not throughput). If the input was exhausted after a
    flat stretch of ``pause_s`` or more and the system was ``idle(start, end)`` over it, the
    stretch is left out too but for its first sample: the input had run out, the commit came
    late. A busy system's flat stretch stays in, with the sample that reached the end (the
    work took that long). Fewer than 3 samples in the window (the input ran out early):
    from ``first_at`` instead, and ``warmup_cut_short``."""
    exhausted = bool(samples) and samples[-1][1] >= EXHAUSTED * total
    usable = [(t, w) for t, w in samples if w < END * total]
    plateau: tuple[float, float] | None = None
    plateau_idle: bool | None = None
    if exhausted and usable:
        last = usable[-1][1]
        i = len(usable) - 1
        while i > 0 and usable[i - 1][1] == last:
            i -= 1
        begin = usable[i][0]
        at_end = next((t for t, w in samples if t > begin and w > last), None)
        if at_end is not None and at_end - begin >= pause_s:
            plateau = (begin, at_end)
            plateau_idle = idle(begin, at_end)
            # Idle: up to the plateau's first sample. Busy: through the sample at the end.
            usable = usable[: i + 1] if plateau_idle else [s for s in samples if s[0] <= at_end]
    start, end = window
    inside = [(t, w) for t, w in usable if start <= t <= end]
    cut_short = False
    if len(inside) < 3:
        inside = [(t, w) for t, w in usable if first_at <= t <= end]
        cut_short = True
    return Span(inside, exhausted, cut_short, plateau, plateau_idle)


class Timeline:
    """Counters sampled over time (CPU seconds of the broker, of the machine, of this
    process), read at any time in between by linear interpolation."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[tuple[float, ...]] = []

    def add(self, t: float, *values: float) -> None:
        self.times.append(t)
        self.values.append(values)

    def at(self, t: float) -> tuple[float, ...]:
        if not self.times:
            raise ValueError("no samples")
        i = bisect.bisect_left(self.times, t)
        if i == 0:
            return self.values[0]
        if i >= len(self.times):
            return self.values[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        v0, v1 = self.values[i - 1], self.values[i]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return tuple(a + (b - a) * f for a, b in zip(v0, v1, strict=True))
