"""bench/experiments/gil_convoy.py: it measures, and leaves the interpreter's switch interval
as it was."""

from __future__ import annotations

import sys

from bench.experiments import gil_convoy


def test_measure_restores_the_switch_interval() -> None:
    before = sys.getswitchinterval()
    per_call_ms = gil_convoy.measure(spinners=1, calls=5, interval_s=0.0005)
    assert per_call_ms >= 1.0  # a 1 ms sleep takes at least 1 ms
    assert sys.getswitchinterval() == before
