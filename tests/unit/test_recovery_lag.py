"""The lag-band arithmetic of bench/recovery_lag.py: when a kill counts as recovered, and when
it never left the band (reported as such, not as 0 s)."""

from __future__ import annotations

from typing import Any

from bench.recovery_lag import Recovery, band_for, held_since, recovery, summarize


def samples(lags: list[int], step: float = 0.5, t0: float = 100.0) -> list[tuple[float, int]]:
    return [(t0 + i * step, lag) for i, lag in enumerate(lags)]


def test_band_is_twice_the_median_with_a_floor_of_half_a_second_of_input() -> None:
    assert band_for([100, 400, 500, 600, 5000], lines_per_s=1000) == 1000
    assert band_for([300, 400, 800], lines_per_s=1000) == 800
    # A median near 0 (a system that commits often): half a second of input, not 0.
    assert band_for([0, 0, 3], lines_per_s=1000) == 500


def test_recovered_at_the_start_of_the_first_held_run_after_leaving_the_band() -> None:
    # kill at 100: in band, out (lag grows), a short dip, out, then in band for good.
    lags = [10, 50, 200, 400, 20, 300, 100, 30, 20, 10, 10]
    got = recovery(samples(lags), killed_at=100.0, band=60, hold_s=1.0)
    assert got == Recovery(3.5)  # the sample at 103.5 starts the run that lasts 1 s


def test_a_short_dip_into_the_band_is_not_recovery() -> None:
    lags = [10, 200, 20, 200, 200]
    assert recovery(samples(lags), killed_at=100.0, band=60, hold_s=1.0) is None


def test_never_leaving_the_band_is_reported_as_such_after_the_observation_window() -> None:
    assert recovery(samples([10] * 10), killed_at=100.0, band=60, hold_s=1.0) is None
    got = recovery(samples([10] * 70), killed_at=100.0, band=60, hold_s=1.0)
    assert got == Recovery(None, never_left_band=True)
    got = recovery(samples([10] * 12), killed_at=100.0, band=60, hold_s=1.0, observe_s=5)
    assert got == Recovery(None, never_left_band=True)


def test_leaving_the_band_only_after_the_observation_window_is_not_the_kill() -> None:
    lags = [10] * 12 + [500, 500, 10, 10, 10]
    got = recovery(samples(lags), killed_at=100.0, band=60, hold_s=1.0, observe_s=5)
    assert got == Recovery(None, never_left_band=True)


def test_samples_before_the_kill_are_ignored() -> None:
    lags = [500, 500, 10, 10, 10, 10]
    got = recovery(samples(lags), killed_at=101.0, band=60, hold_s=1.0)
    assert got is None  # after the kill it never left the band, and 30 s have not passed


def test_summary_leaves_kills_that_never_left_the_band_out_of_the_median() -> None:
    kills: list[dict[str, Any]] = [
        {"recovery_s": 4.0, "never_left_band": False},
        {"recovery_s": None, "never_left_band": True},
        {"recovery_s": 6.0, "never_left_band": False},
        {"recovery_s": None, "never_left_band": True},
    ]
    assert summarize(kills) == {
        "recovery_s_median": 5.0,
        "recovery_s_max": 6.0,
        "kills_recovered": 2,
        "kills_never_left_band": 2,
    }
    assert summarize([])["recovery_s_median"] is None


def test_held_since_needs_the_whole_hold() -> None:
    assert held_since(samples([9, 1, 1]), lambda n: n < 5, 1.0) is None
    assert held_since(samples([9, 1, 1, 1]), lambda n: n < 5, 1.0) == 100.5
