"""bench/harness/latency_jvm.py's pure parts: a probe's latency, and when a run's output is
exact (the JVM producer and the systems themselves run in the bench, not here)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness import latency_jvm
from bench.harness.latency_jvm import Probes


class Watcher:
    def __init__(self, current: dict[str, int], seen: dict[str, Any]) -> None:
        self.current, self.seen = current, seen
        self.not_increasing = 0
        self.error = None


class Alive:
    def alive(self) -> bool:
        return True

    def status(self) -> object:
        return object()


def probes(sent_at: list[float]) -> Probes:
    p = Probes.__new__(Probes)
    p.prefix, p.sent_at = "latprobe1x", sent_at
    return p


def test_a_probe_is_measured_from_its_send_to_its_word_seen() -> None:
    sent = [10.0, 11.0, 12.0, 13.0]
    seen = {f"latprobe1x{n}": ([1], [t + 0.1 * (n + 1)]) for n, t in enumerate(sent)}
    figures = latency_jvm._figures(probes(sent), Watcher({}, seen), measured_from=11.0)  # type: ignore[arg-type]
    assert figures["probes"] == 3  # the warm-up's probe is not measured
    assert figures["p50_ms"] == pytest.approx(300.0)
    assert figures["max_ms"] == pytest.approx(400.0)


def test_no_probe_seen_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no probe"):
        latency_jvm._figures(probes([10.0]), Watcher({}, {}), measured_from=0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "exact"),
    [
        ({"a": 2, "latprobe1x0": 1}, True),
        ({"a": 2, "latprobe1x0": 1, "extra": 1}, False),  # a word nobody sent
        ({"a": 3, "latprobe1x0": 1}, False),  # counted twice
    ],
)
def test_a_run_is_exact_only_with_exactly_the_sent_counts(
    current: dict[str, int], exact: bool
) -> None:
    watcher = Watcher(current, {})
    got = latency_jvm._wait_exact(watcher, {"a": 2, "latprobe1x0": 1}, Alive(), Alive(), 1.0)  # type: ignore[arg-type]
    assert got is exact


def test_probes_never_started_stop_quietly() -> None:
    """A run that fails before its input began stops its probes in its cleanup."""
    unstarted = Probes("127.0.0.1:1", "topic", "latprobe1x")
    unstarted.stop()
    assert unstarted.sent_at == []
