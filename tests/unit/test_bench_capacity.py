"""The pure parts of bench/harness/capacity.py, lag.py and markers.py: when a step kept
up, the ladder's rates, the commits per minute, a row's summary."""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness.capacity import (
    CapacityMode,
    down,
    geometric_middle,
    join_sittings,
    next_bisection,
    next_rates,
    summary,
)
from bench.harness.lag import MAX_LAG_S, LagSample, judge, judge_stage
from bench.harness.markers import per_minute


def test_a_flat_lag_keeps_up_and_a_growing_one_does_not() -> None:
    flat = [(float(t), 5_000.0 + (1_000 if t % 2 else 0)) for t in range(25)]
    assert judge_stage(flat, rate=10_000)["kept_up"]
    # Short of the rate by 5 %: the lag grows 500 records (0.05 s of input) per second.
    growing = [(float(t), 5_000.0 + 500 * t) for t in range(25)]
    verdict = judge_stage(growing, rate=10_000)
    assert not verdict["kept_up"]
    assert "grew" in verdict["why"]


def test_a_standing_backlog_is_not_keeping_up_even_when_flat() -> None:
    standing = [(float(t), 10_000 * (MAX_LAG_S + 1)) for t in range(25)]
    verdict = judge_stage(standing, rate=10_000)
    assert not verdict["kept_up"]
    assert "standing" in verdict["why"]


def _samples(input_lag: list[int], internal_lag: list[int]) -> list[LagSample]:
    return [
        LagSample(
            at=float(t),
            input_end=10_000 * t,
            input_lag=i,
            internal_end=50_000 * t,
            internal_lag=j,
            output_end=0,
        )
        for t, (i, j) in enumerate(zip(input_lag, internal_lag, strict=True))
    ]


def test_judge_fails_when_a_later_stage_falls_behind_though_the_input_keeps_up() -> None:
    # A starved second stage: the input's lag is flat, the repartition topic's grows.
    samples = _samples([1_000] * 20, [10_000 * t for t in range(20)])
    verdict = judge(samples, rate_words=125_000, words_per_record=12.5)
    assert verdict["input"]["kept_up"]
    assert not verdict["internal"]["kept_up"]
    assert not verdict["kept_up"]
    assert verdict["why"].startswith("internal:")
    assert judge(_samples([1_000] * 20, [2_000] * 20), 125_000, 12.5)["kept_up"]


def test_the_ladder_rates() -> None:
    up = next_rates(1.25)
    assert up(400_000) == 500_000
    assert up(20_000) == 25_000
    assert geometric_middle(500_000, 625_000) == 560_000
    assert geometric_middle(8_000, 10_000) == 9_000


def test_commits_per_minute_per_writer_inside_the_window() -> None:
    # Two writers each commit every second (Flink-like: a new producer id per commit); one
    # marker falls outside the window.
    batches = [(1000 + t, float(t)) for t in range(60)] + [(2000 + t, t + 0.5) for t in range(60)]
    batches.append((9, 100.0))
    assert per_minute(batches, (0.0, 60.0), writers=2) == 60.0
    assert per_minute(batches, (0.0, 60.0), writers=4) == 30.0
    assert per_minute([], (0.0, 60.0), writers=2) is None


def test_commits_per_minute_by_producer_id_whoever_writes_to_the_partition() -> None:
    # One writer on the partition (Kafka Streams: a task's output lands in its partition),
    # committing every 1.25 s: 48 a minute, however many writers the job has elsewhere.
    one = [(7, t * 1.25) for t in range(48)]
    assert per_minute(one, (0.0, 60.0), writers=None) == 48.0
    # Four writers on it (this project's keyed tasks), every 2.5 s, one of them slower.
    four = [(pid, t * 2.5) for pid in (1, 2, 3) for t in range(24)]
    four += [(4, t * 3.0) for t in range(20)]
    assert per_minute(four, (0.0, 60.0), writers=None) == 24.0
    assert per_minute([], (0.0, 60.0), writers=None) is None


def test_summary_flags_a_slow_effective_interval() -> None:
    runs: list[dict[str, Any]] = [
        {
            "ok": True,
            "interval_ms": 1000,
            "capacity_words_per_s": cap,
            "checkpoints_per_min": 20.0,
            "at_capacity": {"cpu_s_per_m_words": 1.0, "bench_cpu_share": 0.01},
        }
        for cap in (100_000, 120_000, 110_000)
    ]
    runs.append({"ok": False, "interval_ms": 1000, "error": "x"})
    s = summary(runs)
    assert s["words_per_s"] == 110_000
    assert s["words_per_s_range"] == [100_000, 120_000]
    assert (s["runs"], s["ok_runs"]) == (4, 3)
    assert s["effective_interval_ms"] == 3000
    assert s["interval_flag"] is True


def test_down_the_ladder_two_steps_at_a_time() -> None:
    assert down(400_000, 1.25) == 260_000
    assert down(20_000, 1.25) == 13_000


def _sitting(stamp: str, rows: dict[str, list[int]], cpu: str = "cpu") -> dict[str, Any]:
    return {
        "method": "m",
        "machine": {"cores": 2, "cpu": cpu, "memory_gib": 24},
        "timestamp": stamp,
        "commit": stamp * 2,
        "order": [f"{key}#{k}" for key, caps in rows.items() for k in range(len(caps))],
        "rows": {
            key: {
                "system": key,
                "runs": [
                    {"ok": True, "interval_ms": 1000, "capacity_words_per_s": c} for c in caps
                ],
                "summary": {},
            }
            for key, caps in rows.items()
        },
    }


def test_sittings_join_into_one_phase_with_each_rows_runs_from_all_of_them() -> None:
    """A full capacity run in sittings: a row's runs from each, its summary over them all."""
    first = _sitting("a", {"processor": [100, 200], "kafka_streams": [50]})
    second = _sitting("b", {"processor": [300, 400, 500], "flink": [70]})
    joined = join_sittings([first, second])
    assert set(joined["rows"]) == {"processor", "kafka_streams", "flink"}
    assert joined["rows"]["processor"]["summary"]["runs"] == 5
    assert joined["rows"]["processor"]["summary"]["words_per_s"] == 300
    assert joined["rows"]["flink"]["summary"]["words_per_s"] == 70
    assert [s["timestamp"] for s in joined["sittings"]] == ["a", "b"]
    assert len(first["rows"]["processor"]["runs"]) == 2  # the inputs are left as they were


def test_sittings_on_two_machines_are_not_joined() -> None:
    first = _sitting("a", {"processor": [100]})
    other = _sitting("b", {"processor": [300]}, cpu="another cpu")
    with pytest.raises(ValueError, match="different"):
        join_sittings([first, other])
    unnamed = {k: v for k, v in _sitting("c", {"processor": [300]}).items() if k != "machine"}
    with pytest.raises(ValueError, match="unnamed"):
        join_sittings([first, unnamed])


def test_every_ladder_ends_with_its_figure_to_the_same_precision() -> None:
    """Up the ladder (480 k kept up, 580 k not) one bisection brings the two within 10 %; down
    from a start too high (440 k not, 310 k kept up) it takes two, not one."""
    mode = CapacityMode(start=480_000)
    assert next_bisection(480_000, 580_000, 0, mode) == 530_000
    assert next_bisection(530_000, 580_000, 1, mode) is None
    assert next_bisection(310_000, 440_000, 0, mode) == 370_000
    assert next_bisection(370_000, 440_000, 1, mode) == 400_000
    assert next_bisection(400_000, 440_000, 2, mode) is None
    assert next_bisection(100_000, 1_000_000, mode.bisections, mode) is None  # bounded


def test_a_sitting_hands_over_its_report_after_every_run(monkeypatch: Any, tmp_path: Any) -> None:
    """A sitting cut short keeps what it measured: the report so far, summaries included,
    after each run, and a run that crashed is a result, not the end of the sitting."""
    import types

    import bench.harness.capacity as capacity

    made: list[dict[str, Any] | Exception] = [
        {"ok": True, "capacity_words_per_s": 100, "steps": []},
        RuntimeError("boom"),
    ]

    def fake_run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        made_now = made.pop(0)
        if isinstance(made_now, Exception):
            raise made_now
        return made_now

    monkeypatch.setattr(capacity, "capacity_run", fake_run)
    peer = types.SimpleNamespace(title="P", settings=lambda: {})
    row = types.SimpleNamespace(key="p", peer=peer, note="", interval_ms=1000)
    seen: list[tuple[int, Any]] = []

    def after_run(report: dict[str, Any]) -> None:
        entry = report["rows"]["p"]
        seen.append((len(entry["runs"]), entry["summary"]["words_per_s"]))

    broker: Any = types.SimpleNamespace(bootstrap="unused:1")
    report = capacity.run_rows(
        [row],
        broker,
        2,
        tmp_path,
        "t",
        lambda _: None,
        quick=True,
        after_run=after_run,
    )
    assert seen == [(1, 100), (2, 100)]
    assert report["rows"]["p"]["runs"][1]["error"] == "RuntimeError('boom')"
