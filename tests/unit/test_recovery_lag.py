"""The lag-band arithmetic of bench/recovery_lag.py: when a kill counts as recovered."""

from __future__ import annotations

from bench.recovery_lag import held_since, recovery


def samples(lags: list[int], step: float = 0.5, t0: float = 100.0) -> list[tuple[float, int]]:
    return [(t0 + i * step, lag) for i, lag in enumerate(lags)]


def test_recovered_at_the_start_of_the_first_held_run_after_leaving_the_band() -> None:
    # kill at 100: in band, out (lag grows), a short dip, out, then in band for good.
    lags = [10, 50, 200, 400, 20, 300, 100, 30, 20, 10, 10]
    got = recovery(samples(lags), killed_at=100.0, band=60, hold_s=1.0)
    assert got == 3.5  # the sample at 103.5 starts the run that lasts 1 s


def test_a_short_dip_into_the_band_is_not_recovery() -> None:
    lags = [10, 200, 20, 200, 200]
    assert recovery(samples(lags), killed_at=100.0, band=60, hold_s=1.0) is None


def test_never_leaving_the_band_counts_zero_only_after_30_s() -> None:
    assert recovery(samples([10] * 10), killed_at=100.0, band=60, hold_s=1.0) is None
    assert recovery(samples([10] * 70), killed_at=100.0, band=60, hold_s=1.0) == 0.0


def test_samples_before_the_kill_are_ignored() -> None:
    lags = [500, 500, 10, 10, 10, 10]
    got = recovery(samples(lags), killed_at=101.0, band=60, hold_s=1.0)
    assert got is None  # after the kill it never left the band, and 30 s have not passed


def test_held_since_needs_the_whole_hold() -> None:
    assert held_since(samples([9, 1, 1]), lambda n: n < 5, 1.0) is None
    assert held_since(samples([9, 1, 1, 1]), lambda n: n < 5, 1.0) == 100.5
