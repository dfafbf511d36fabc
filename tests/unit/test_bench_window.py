"""bench/harness/window.py: where a steady-state run's window ends and which samples its slope
is taken over, on the committed progress of the runs that made it (issue #42/#44: Flink's
pre-aggregating row read the input in 4 s, committed its last offsets 10 s later, and was
reported at 0 words/s)."""

from __future__ import annotations

import pytest

from bench.harness.measure import slope
from bench.harness.window import Span, Timeline, flat_for, measured_span, window_over

TOTAL = 24_000_000
# The quick run's flink_preagg samples (s after the first commit, committed words): the input
# read in about 4 s, its end committed after the window (10 s of Flink's fetch poll).
PREAGG = [(0.0, 5_002_768), (1.0, 8_878_156), (2.0, 14_396_346), (3.0, 20_514_371)]
PREAGG += [(float(t), 20_514_371) for t in range(4, 14)] + [(14.0, TOTAL), (15.0, TOTAL)]


def _idle(_a: float, _b: float) -> bool:
    return True


def _busy(_a: float, _b: float) -> bool:
    return False


def test_flat_for_counts_from_the_first_sample_of_the_latest_value() -> None:
    assert flat_for([], 5.0) == 0.0
    assert flat_for([(0.0, 1.0), (1.0, 2.0)], 1.5) == pytest.approx(0.5)
    assert flat_for(PREAGG[:10], 9.0) == pytest.approx(6.0)  # flat since 3.0


def test_a_flat_tail_at_the_planned_end_is_waited_out() -> None:
    def over(now: float) -> str | None:
        seen = [s for s in PREAGG if s[0] <= now]
        return window_over(now, planned_end=9.0, samples=seen, total=TOTAL, pause_s=3, stall_s=20)

    assert over(5.0) is None  # before the planned end
    assert over(9.0) is None  # flat for 6 s: maybe the input's end, committed late
    assert over(13.5) is None
    assert over(14.0) == "exhausted"
    # Progress at the planned end: the window ends there.
    steady = [(float(t), 1e6 * t) for t in range(10)]
    assert window_over(9.0, 9.0, steady, TOTAL, 3, 20) == "window"
    # Progress paused for less than pause_s: also ends (a slow checkpoint is throughput).
    paused = [*steady, (10.0, 9e6), (11.0, 9e6)]
    assert window_over(11.0, 9.0, paused, TOTAL, 3, 20) == "window"


def test_no_progress_with_input_left_is_a_stall() -> None:
    stuck = [(float(t), 5e6) for t in range(25)]
    assert window_over(19.0, 9.0, stuck, TOTAL, 3, 20) is None
    assert window_over(20.0, 9.0, stuck, TOTAL, 3, 20) == "stalled"
    # Also in the warm-up: the planned end does not matter.
    assert window_over(20.0, 60.0, stuck, TOTAL, 3, 20) == "stalled"


def test_an_idle_plateau_before_the_end_is_left_out() -> None:
    span = measured_span(PREAGG, TOTAL, (3.0, 14.0), 0.0, 3.0, _idle)
    assert span.exhausted
    assert span.plateau == (3.0, 14.0)
    assert span.plateau_idle is True
    # Only one sample left in the window: measured from the first commit instead.
    assert span.warmup_cut_short
    assert span.samples == PREAGG[:4]
    rate = slope(span.samples)
    assert rate is not None and 5.0e6 < rate < 5.3e6  # not 0


def test_a_busy_plateau_stays_in_with_the_sample_at_the_end() -> None:
    span = measured_span(PREAGG, TOTAL, (3.0, 14.0), 0.0, 3.0, _busy)
    assert span.plateau_idle is False
    assert span.samples[-1] == (14.0, TOTAL)  # the work took that long
    assert not span.warmup_cut_short
    rate = slope(span.samples)
    assert rate is not None and rate < 1e6


def test_a_large_backlog_drained_near_the_end_of_the_window() -> None:
    # The 100 M-word run of flink_preagg: 96 M committed at 20 s, the end at 31 s.
    total = 100_000_000
    rising = [(float(t), 4.8e6 * t) for t in range(21)]
    samples = rising + [(float(t), 96e6) for t in range(21, 31)] + [(31.0, float(total))]
    span = measured_span(samples, total, (5.0, 31.0), 0.0, 3.0, _idle)
    assert span.plateau == (20.0, 31.0)
    assert span.samples == [s for s in rising if s[0] >= 5.0]
    assert not span.warmup_cut_short
    # A short flat stretch (a slow checkpoint) is no plateau: all of it is throughput.
    short = [*rising, (21.0, 96e6), (22.0, float(total))]
    span = measured_span(short, total, (5.0, 22.0), 0.0, 3.0, _idle)
    assert span.plateau is None
    assert span.samples[-1] == (21.0, 96e6)  # the end of the input is never in a slope


def test_a_run_that_never_ran_out_keeps_every_window_sample() -> None:
    samples = [(float(t), 1e6 * t) for t in range(12)]
    span = measured_span(samples, TOTAL, (3.0, 11.0), 0.0, 3.0, _idle)
    assert span == Span([s for s in samples if s[0] >= 3.0], False, False)


def test_timeline_interpolates_between_marks() -> None:
    marks = Timeline()
    with pytest.raises(ValueError, match="no samples"):
        marks.at(0.0)
    marks.add(10.0, 1.0, 100.0)
    marks.add(12.0, 3.0, 100.0)
    assert marks.at(11.0) == pytest.approx((2.0, 100.0))
    assert marks.at(5.0) == (1.0, 100.0)
    assert marks.at(20.0) == (3.0, 100.0)


def test_runs_without_a_full_window_are_named_in_the_report() -> None:
    from bench.harness.report import _steady_run_notes
    from bench.harness.steady import drain_notes

    drained = {
        "ok": True,
        "input_exhausted": True,
        "warmup_cut_short": True,
        "final_plateau": {"s": 10.2, "idle": True, "excluded": True},
    }
    assert drain_notes(drained) == [
        "input exhausted",
        "measured from the first commit",
        "final commit 10.2 s late (idle, left out)",
    ]
    assert drain_notes({"ok": True, "input_exhausted": False}) == []
    slow = {"ok": True, "input_exhausted": False, "window_extended_s": 12.3}
    assert drain_notes(slow) == ["window extended 12.3 s (committed progress flat at its end)"]
    stalled = {"ok": False, "error": "stalled: no committed input progress for 20 s at 5"}
    steady = {
        "rows": {
            "flink_preagg": {"runs": [drained]},
            "flink": {"runs": [stalled, {"ok": True}]},
            "processor_emit_record": {"runs": [slow]},
        }
    }
    notes = _steady_run_notes(steady)
    assert "* flink_preagg run 1: input exhausted; measured from the first commit; final " in (
        "\n".join(notes)
    )
    assert "* flink run 1: not ok: stalled: no committed input progress for 20 s at 5" in notes
    assert not any("flink run 2" in n for n in notes)
    assert "* processor_emit_record run 1: window extended 12.3 s" in "\n".join(notes)
    assert _steady_run_notes({"rows": {"flink": {"runs": [{"ok": True}]}}}) == []


def test_span_flags_say_how_the_span_was_chosen() -> None:
    from bench.harness.steady import span_flags

    span = measured_span(PREAGG, TOTAL, (3.0, 14.0), 0.0, 3.0, _idle)
    flags = span_flags(span, 3.0, 14.0, {})
    assert flags == {
        "input_exhausted": True,
        "warmup_cut_short": True,
        "window_waited_s": 11.0,
        "final_plateau": {"s": 11.0, "idle": True, "excluded": True},
    }
    # The input ran out in the warm-up (the window then starts at the first commit, where
    # enough samples are): still cut short.
    early = measured_span(PREAGG, TOTAL, (0.0, 14.0), 0.0, 3.0, _idle)
    assert not early.warmup_cut_short
    assert span_flags(early, 0.0, 14.0, {"warmup_cut_short": True})["warmup_cut_short"]


def test_rows_picks_steady_rows_of_the_systems() -> None:
    from bench.harness.modes import steady_row_keys

    assert steady_row_keys(["flink"], None) is None
    assert steady_row_keys(["flink"], "") is None
    assert steady_row_keys(["flink"], "flink_preagg, ceiling") == {"flink_preagg", "ceiling"}
    with pytest.raises(ValueError, match="unknown steady rows \\['processor'\\]"):
        steady_row_keys(["flink"], "processor")
