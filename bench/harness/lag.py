"""The lag of a job's stages, sampled from offsets, and whether each stage kept up with its
input (bench/capacity.py's judgement of a step).

The lag is sampled once a second by the bench's process from the group's committed offsets
and the topics' end offsets (a few requests, no records read).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.harness.common import every
from bench.harness.measure import slope

# Lag gained per second of the window, at most (in seconds of input): a system short of the
# rate by x % of its capacity gains about x / 100 s per s.
MAX_GROWTH = 0.03
# A standing backlog: a median lag above this is not keeping up, even if flat.
MAX_LAG_S = 5.0
# Drained: each internal partition at most this many offsets behind (its trailing
# transaction markers, this project's barriers).
DRAINED_PER_PARTITION = 10


@dataclass(frozen=True)
class LagSample:
    at: float
    input_end: int  # the input's end offsets, summed
    input_lag: int  # records between the group's committed offsets and the end
    internal_end: int  # end offsets of the internal topics the group commits on
    internal_lag: int
    output_end: int


class LagProbe(threading.Thread):
    """Once a second: the group's lag on its input and internal topics, and the output's end
    offsets. Offsets only: it reads no record."""

    def __init__(
        self, bootstrap: str, group: str, input_topic: str, output_topic: str, partitions: int
    ) -> None:
        super().__init__(daemon=True, name=f"lag-{group}")
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.partitions = partitions
        self.samples: list[LagSample] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._group = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._internal: list[TopicPartition] = []
        self._discovered_at = 0.0

    def _ends(self, parts: Sequence[TopicPartition]) -> list[int]:
        return [
            self._group.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), 10)[1]
            for tp in parts
        ]

    def _discover(self) -> None:
        """The internal partitions: those of the cluster's other topics that the group has
        committed offsets on (the topics of a bench broker are few)."""
        topics = self._group.list_topics(timeout=10).topics
        candidates = [
            TopicPartition(name, p)
            for name, meta in topics.items()
            if name not in (self.input_topic, self.output_topic) and not name.startswith("__")
            for p in meta.partitions
        ]
        committed = self._group.committed(candidates, timeout=10) if candidates else []
        self._internal = [
            TopicPartition(tp.topic, tp.partition)
            for tp in committed
            if tp.error is None and tp.offset >= 0
        ]
        self._discovered_at = time.monotonic()

    def sample(self) -> LagSample:
        if time.monotonic() - self._discovered_at > 10:
            self._discover()
        inputs = [TopicPartition(self.input_topic, p) for p in range(self.partitions)]
        committed = self._group.committed(inputs + self._internal, timeout=10)
        offsets = [max(0, tp.offset) if tp.error is None else 0 for tp in committed]
        ends = self._ends(inputs + self._internal)
        n = len(inputs)
        outputs = [TopicPartition(self.output_topic, p) for p in range(self.partitions)]
        lags = [max(0, e - o) for e, o in zip(ends, offsets, strict=True)]
        out = LagSample(
            at=time.time(),
            input_end=sum(ends[:n]),
            input_lag=sum(lags[:n]),
            internal_end=sum(ends[n:]),
            internal_lag=sum(lags[n:]),
            output_end=sum(self._ends(outputs)),
        )
        self.samples.append(out)
        return out

    def run(self) -> None:
        every(1.0, self._halt, self.sample, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc

    def committed_input(self) -> int:
        """Records of the input before the group's committed offsets."""
        return self.samples[-1].input_end - self.samples[-1].input_lag if self.samples else 0

    def drained(self) -> bool:
        """Nothing left to read: the input's lag is 0, and each internal partition's at most
        a few offsets (a consumer commits the offset after its last record, and a transaction
        marker may follow it)."""
        last = self.samples[-1] if self.samples else None
        # Per internal partition: its trailing markers, and this project's barriers (control
        # records in the shuffle, written every checkpoint even when no data moves).
        settled = DRAINED_PER_PARTITION * len(self._internal)
        return last is not None and last.input_lag == 0 and last.internal_lag <= settled

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        self._group.close()


# ------------------------------------------------------------------------------ judging


def lag_seconds(lags: Sequence[tuple[float, float]], rate: float) -> list[tuple[float, float]]:
    """Records behind as seconds of input at ``rate`` records/s."""
    return [(t, lag / rate) for t, lag in lags] if rate > 0 else []


def judge_stage(lags: Sequence[tuple[float, float]], rate: float) -> dict[str, Any]:
    """One stage over a window: its lag (records) against the records/s it is fed."""
    seconds = lag_seconds(lags, rate)
    if len(seconds) < 3:
        return {"kept_up": False, "why": f"only {len(seconds)} lag samples"}
    growth = slope(seconds) or 0.0
    median = statistics.median(s for _, s in seconds)
    ok = growth <= MAX_GROWTH and median <= MAX_LAG_S
    why = (
        "kept up"
        if ok
        else (
            f"lag grew {growth:.3f} s per s"
            if growth > MAX_GROWTH
            else f"a standing backlog of {median:.1f} s"
        )
    )
    return {
        "kept_up": ok,
        "why": why,
        "lag_growth_s_per_s": round(growth, 4),
        "lag_median_s": round(median, 2),
    }


def judge(
    samples: Sequence[LagSample], rate_words: float, words_per_record: float
) -> dict[str, Any]:
    """Whether every stage kept up over the window's samples."""
    if len(samples) < 3:
        return {"kept_up": False, "why": f"only {len(samples)} samples"}
    records = rate_words / words_per_record
    out: dict[str, Any] = {"input": judge_stage([(s.at, s.input_lag) for s in samples], records)}
    internal_rate = slope([(s.at, float(s.internal_end)) for s in samples]) or 0.0
    if samples[-1].internal_end > 0 and internal_rate > 0:
        out["internal"] = judge_stage([(s.at, s.internal_lag) for s in samples], internal_rate)
        out["internal"]["records_per_s"] = round(internal_rate)
    failed = [v for v in out.values() if not v["kept_up"]]
    out["kept_up"] = not failed
    out["why"] = (
        "kept up"
        if not failed
        else "; ".join(
            f"{k}: {v['why']}" for k, v in out.items() if isinstance(v, dict) and not v["kept_up"]
        )
    )
    return out
