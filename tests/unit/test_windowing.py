"""A window over a whole stream (`Stream.window_all`) and the top n per window (``top``,
`processor.api.windowing`) through `processor.testing`: each checked against a direct
computation over random records, whatever the tasks, partitions and checkpoints; late records,
empty windows, ties and the event time of the results."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from processor import Pipeline, PipelineError, Stream
from processor.engine.shuffle_out import ShuffleOut
from processor.models.records import decode_shuffle
from processor.plan.stages import plan
from processor.testing import Driver

# (tasks per keyed stage, source partitions, records between checkpoints)
LAYOUTS = [(1, 1, 1000), (3, 2, 7)]
DISORDER = 40
Row = dict[str, Any]


def _records(seed: int, n: int = 300, keys: int = 6, spread: int = 9) -> list[Row]:
    """Records ``{k, v, ts}``, event times rising about 3 ms a record with disorder within
    ``DISORDER``; values small so that ties are common."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        ts = max(0, i * 3 - rng.randrange(DISORDER))
        records.append({"k": f"k{rng.randrange(keys)}", "v": rng.randrange(spread), "ts": ts})
    return records


def _source(p: Pipeline) -> Stream[Any]:
    return p.source("in", value="json", timestamp=lambda r: r["ts"], out_of_orderness_ms=DISORDER)


def _drive(p: Pipeline, records: list[Row], layout: tuple[int, int, int]) -> Driver:
    driver = Driver(p, *layout)
    for record in records:
        driver.send("in", json.dumps(record).encode())
    driver.finish()
    assert driver.dead_records() == []
    return driver


def _values(driver: Driver, topic: str = "out") -> list[Any]:
    return [value for _, value in driver.output(topic)]


def _starts(ts: int, size: int, slide: int) -> list[int]:
    return list(range(ts - ts % slide, ts - size, -slide))


def _canon(rows: list[Any]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _best(rows: list[Any], n: int, by: Callable[[Any], Any], ties: bool) -> list[Any]:
    """The top ``n`` of ``rows`` by ``by``, best first; among equal ones the smallest JSON
    text first (the order `processor.api.windowing` promises)."""
    ranked = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, separators=(",", ":")))
    ranked.sort(key=by, reverse=True)
    if len(ranked) <= n:
        return ranked
    if ties:
        return [r for r in ranked if by(r) >= by(ranked[n - 1])]
    return ranked[:n]


def _by_window(rows: list[Row]) -> dict[tuple[int, int], list[Row]]:
    """Output rows grouped by their window, in the order they came."""
    grouped: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for row in rows:
        grouped[row["start"], row["end"]].append(row)
    return dict(grouped)


# -- window_all ------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("size", "slide"), [(100, None), (100, 40)])
@pytest.mark.parametrize("seed", range(3))
def test_window_all_aggregates_every_record_once_per_window(
    seed: int, size: int, slide: int | None, layout: tuple[int, int, int]
) -> None:
    records = _records(seed)
    p = Pipeline()
    windows = _source(p).window_all(size_ms=size, slide_ms=slide)
    windows.count().sink("out")
    windows.aggregate([0, 0], lambda a, r: [a[0] + r["v"], a[1] + 1], merge=None).sink("sums")
    windows.reduce(lambda a, b: a if a["v"] >= b["v"] else b).map(lambda w: w["value"]["v"]).sink(
        "peaks"
    )
    driver = _drive(p, records, layout)
    counts: dict[int, int] = defaultdict(int)
    sums: dict[int, int] = defaultdict(int)
    peaks: dict[int, int] = defaultdict(int)
    for r in records:
        for start in _starts(r["ts"], size, slide or size):
            counts[start] += 1
            sums[start] += r["v"]
            peaks[start] = max(peaks[start], r["v"])
    got = _values(driver)
    assert _canon(got) == _canon(
        [{"key": None, "start": s, "end": s + size, "value": n} for s, n in counts.items()]
    )
    assert {(w["start"], w["value"][0], w["value"][1]) for w in _values(driver, "sums")} == {
        (s, sums[s], counts[s]) for s in counts
    }
    assert sorted(_values(driver, "peaks")) == sorted(peaks.values())
    # Keyed "None@<start>": the window's key is None.
    assert {k for k, _ in driver.output("out")} == {f"None@{s}" for s in counts}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", range(3))
def test_window_all_sessions_over_the_whole_stream(seed: int, layout: tuple[int, int, int]) -> None:
    rng = random.Random(seed)
    times, at = [], 0
    for _ in range(120):
        at += rng.choice([1, 2, 3, 60])  # now and then a pause longer than the gap
        times.append(at)
    records = [{"k": "x", "v": 1, "ts": t} for t in times]
    head = records[:5]
    rng.shuffle(head)
    records[:5] = head  # a little disorder at the start, within the bound
    p = Pipeline()
    _source(p).window_all(gap_ms=50).aggregate(
        0, lambda n, _r: n + 1, merge=lambda a, b: a + b
    ).sink("out")
    driver = _drive(p, records, layout)
    sessions: list[list[int]] = []
    for t in sorted(times):
        if sessions and t < sessions[-1][-1] + 50:
            sessions[-1].append(t)
        else:
            sessions.append([t])
    assert _canon(_values(driver)) == _canon(
        [{"key": None, "start": s[0], "end": s[-1] + 50, "value": len(s)} for s in sessions]
    )


def test_window_all_on_a_keyed_stream_ignores_the_key_and_process_gets_none() -> None:
    p = Pipeline()
    seen = _source(p).key_by(lambda r: r["k"]).window_all(size_ms=10, name="all")
    seen.process(lambda r, state: [[state.key, r["k"]]]).sink("out")
    driver = _drive(p, [{"k": "a", "v": 0, "ts": 1}, {"k": "b", "v": 0, "ts": 2}], (3, 1, 1))
    assert sorted(w["value"] for w in _values(driver)) == [[None, "a"], [None, "b"]]
    assert [s.name for s in driver.plan.stages][-1] == "all"


def test_window_all_late_records_and_an_empty_window() -> None:
    """A record behind the watermark goes to the late records and changes no window; a window
    without records emits nothing."""
    p = Pipeline()
    p.source("in", value="json", timestamp=lambda r: r["ts"]).window_all(size_ms=10).count().sink(
        "out"
    )
    driver = Driver(p, partitions=2)
    for ts in (1, 3, 12):
        driver.send("in", {"k": "a", "v": 0, "ts": ts})
    driver.checkpoint()
    driver.checkpoint()  # the watermark (12) has closed [0, 10) downstream, just
    driver.send("in", {"k": "a", "v": 0, "ts": 5})
    driver.send("in", {"k": "a", "v": 0, "ts": 38})  # nothing in [20, 30)
    driver.finish()
    assert _values(driver) == [
        {"key": None, "start": 0, "end": 10, "value": 2},
        {"key": None, "start": 10, "end": 20, "value": 1},
        {"key": None, "start": 30, "end": 40, "value": 1},
    ]
    assert [v for _, v in driver.late_records()] == [{"k": "a", "v": 0, "ts": 5}]


def test_window_all_refuses_results_without_bounds_and_bad_shapes() -> None:
    p = Pipeline()
    source = _source(p)
    with pytest.raises(PipelineError, match="always carry it"):
        source.window_all(size_ms=10, bounds=False)  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="give size_ms"):
        source.window_all()
    with pytest.raises(PipelineError, match="sessions merge"):
        source.window_all(gap_ms=10).aggregate(0, lambda n, _r: n + 1)


# -- top over the results of a windowed aggregation ------------------------------------------


def _counts(records: list[Row], size: int, slide: int) -> dict[int, list[Row]]:
    """Per window start, each key's count as the window gives it."""
    counts: dict[tuple[int, str], int] = defaultdict(int)
    for r in records:
        for start in _starts(r["ts"], size, slide):
            counts[start, r["k"]] += 1
    per_window: dict[int, list[Row]] = defaultdict(list)
    for (start, key), n in counts.items():
        per_window[start].append({"key": key, "start": start, "end": start + size, "value": n})
    return per_window


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("n", "ties"), [(1, True), (2, True), (2, False), (10, True)])
@pytest.mark.parametrize(("size", "slide"), [(60, None), (60, 20)])
@pytest.mark.parametrize("seed", range(2))
def test_top_results_per_window_over_all_keys(
    seed: int, size: int, slide: int | None, n: int, ties: bool, layout: tuple[int, int, int]
) -> None:
    records = _records(seed, keys=8)
    p = Pipeline()
    counts = _source(p).key_by(lambda r: r["k"]).window(size_ms=size, slide_ms=slide, bounds=True)
    counts.count().top(n, by=lambda w: w["value"], ties=ties).sink("out")
    driver = _drive(p, records, layout)
    want = _counts(records, size, slide or size)
    got = _by_window(_values(driver))
    assert set(got) == {(s, s + size) for s in want}
    for start, rows in want.items():
        # Each window's rows in one piece, best first: exactly the ranking.
        assert got[start, start + size] == _best(rows, n, lambda w: w["value"], ties)
    if n == 1 and ties:
        assert any(len(rows) > 1 for rows in got.values())  # the seeds give ties


def _scores(rng: random.Random, kind: str) -> list[Any]:
    """Scores with many ties: of one kind, or of the kinds a bound must not cut by."""
    if kind == "int":
        return [rng.randrange(5) for _ in range(rng.randrange(1, 30))]
    if kind == "float":
        return [rng.randrange(5) / 2 for _ in range(rng.randrange(1, 30))]
    if kind == "str":
        return [rng.choice("abc") for _ in range(rng.randrange(1, 30))]
    odd = [float("nan"), True, None, [1], "x", 2.5, 3]
    return [rng.choice([*odd, rng.randrange(5)]) for _ in range(rng.randrange(1, 30))]


@pytest.mark.parametrize("kind", ["int", "float", "str", "odd"])
@pytest.mark.parametrize(("n", "ties"), [(1, True), (1, False), (2, True), (3, False)])
def test_a_tasks_bound_keeps_every_result_the_top_may_rank(kind: str, n: int, ties: bool) -> None:
    """`top_results` ships, of each window's results a task takes together, only those
    `_Top.bound` keeps: whatever pieces the results come in, ranking what is kept ranks them
    all. Scores of no total order (a NaN, a bool, mixed kinds) are all kept."""
    from processor.api.windowing import _Top

    rng = random.Random(f"{kind}{n}{ties}")
    top = _Top(n, lambda row: row["s"], ties, "top")
    pruned = 0
    for _ in range(300):
        rows = [{"s": s, "i": i} for i, s in enumerate(_scores(rng, kind))]
        cuts = sorted(rng.sample(range(1, len(rows) + 1), rng.randrange(min(3, len(rows)))))
        pieces = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
        kept = [row for piece in pieces for row in top.bound(piece)]
        assert all(k in piece for piece in pieces for k in top.bound(piece))
        pruned += len(rows) - len(kept)
        if kind == "odd":  # a piece is cut only if its scores are plain numbers
            for piece in pieces:
                plain = all(type(r["s"]) in (int, float) and r["s"] == r["s"] for r in piece)
                assert plain or top.bound(piece) == piece
        else:
            assert top.rank(kept) == top.rank(rows)
    assert pruned > 0


def test_top_results_ship_only_what_may_rank_and_a_failing_by_is_still_dead() -> None:
    """Through the shuffle to the top go only the results a task's bound keeps; a ``by``
    that raises leaves its window's results all shipped, and the top makes that one dead."""
    records = [{"k": f"k{i % 7}", "v": 0, "ts": i} for i in range(70)]
    p = Pipeline()
    counts = _source(p).key_by(lambda r: r["k"]).window(size_ms=100, bounds=True).count()
    counts.top(1, by=lambda w: w["value"] + (w["key"] == "k0")).sink("out")
    assert _values(_drive(p, records, (1, 1, 1000))) == [
        {"key": "k0", "start": 0, "end": 100, "value": 10}
    ]
    compiled = plan(p)
    node = next(n for stage in compiled.stages for n in stage.shuffles if n.prune is not None)
    out = ShuffleOut(node, compiled.target(node), 1, 32768, lambda n, e, v: None)
    results = [{"key": f"k{i}", "start": 0, "end": 100, "value": 10 + (i == 0)} for i in range(7)]
    out.add([0] * 7, results, times=[99] * 7)
    [(_, shuffled)] = out.take(0)
    assert [item[1] for item in decode_shuffle(shuffled)[1]] == results[:1]

    p = Pipeline()
    counts = _source(p).key_by(lambda r: r["k"]).window(size_ms=100, bounds=True).count()
    counts.top(1, by=lambda w: 1 // (w["key"] != "k3")).sink("out")
    driver = Driver(p)
    for record in records:
        driver.send("in", json.dumps(record).encode())
    driver.finish()
    assert [d.operator for d in driver.dead_records()] == [
        "in.key_by.window.count.top.window.aggregate"
    ]
    assert len(_values(driver)) == 6  # the six others, all tied at 10


def test_top_results_come_at_the_end_of_their_window_and_late_records_change_nothing() -> None:
    """Each row has its window's end - 1 as its event time, as every window result; a record
    late for the window it would have counted in is in the late records only."""
    p = Pipeline()
    source = p.source("in", value="json", timestamp=lambda r: r["ts"])
    counts = source.key_by(lambda r: r["k"]).window(size_ms=10, bounds=True).count()
    top = counts.top(1, by=lambda w: w["value"])
    top.map(lambda w, meta: [w["key"], w["end"], meta.timestamp], meta=True).sink("out")
    driver = Driver(p, partitions=3)
    for k, ts in [("a", 1), ("b", 2), ("b", 3), ("c", 4), ("a", 33)]:  # nothing in [10, 30)
        driver.send("in", {"k": k, "ts": ts})
    driver.checkpoint()
    driver.checkpoint()
    driver.checkpoint()
    assert _values(driver) == [["b", 10, 9]]  # the watermark (33) closed [0, 10) alone
    driver.send("in", {"k": "a", "ts": 5})  # late: [0, 10) has closed
    driver.send("in", {"k": "a", "ts": 6})
    driver.finish()
    assert _values(driver) == [["b", 10, 9], ["a", 40, 39]]
    assert len(driver.late_records()) == 2


def test_top_results_after_a_window_with_lateness_are_exact() -> None:
    """With lateness the window's results come later than the watermark that passed their
    end; the top waits for them (none is late there)."""
    records = [{"k": "a", "v": 0, "ts": 1}, {"k": "b", "v": 0, "ts": 30}]
    records += [
        {"k": "b", "v": 0, "ts": 8},
        {"k": "b", "v": 0, "ts": 9},
        {"k": "c", "v": 0, "ts": 45},
    ]
    p = Pipeline()
    windows = p.source("in", value="json", timestamp=lambda r: r["ts"]).key_by(lambda r: r["k"])
    windows.window(size_ms=10, lateness_ms=25, bounds=True).count().top(
        1, by=lambda w: w["value"]
    ).sink("out")
    driver = Driver(p, partitions=2, checkpoint_every=1)
    for record in records:
        driver.send("in", record)
    driver.finish()
    assert driver.late_records() == []
    assert sorted((w["key"], w["start"], w["value"]) for w in _values(driver)) == [
        ("b", 0, 2),
        ("b", 30, 1),
        ("c", 40, 1),
    ]


def test_top_results_through_a_filter_and_by_a_windowed_process() -> None:
    p = Pipeline()
    keyed = _source(p).key_by(lambda r: r["k"])
    emitted = keyed.window(size_ms=100, bounds=True).process(lambda r, _s: [r["v"]])
    emitted.filter(lambda w: w["value"] % 2 == 0).top(2, by=lambda w: w["value"], ties=False).map(
        lambda w: w["value"]
    ).sink("out")
    records = _records(3, n=100)
    driver = _drive(p, records, (3, 2, 7))
    per_window: dict[int, list[int]] = defaultdict(list)
    for r in records:
        if r["v"] % 2 == 0:
            per_window[r["ts"] // 100].append(r["v"])
    assert sorted(_values(driver)) == sorted(
        v for vs in per_window.values() for v in sorted(vs)[-2:]
    )


def test_top_refuses_what_it_cannot_rank() -> None:
    p = Pipeline()
    keyed = _source(p).key_by(lambda r: r["k"])
    with pytest.raises(PipelineError, match="results of a windowed aggregation"):
        keyed.count().top(1, by=lambda w: w)  # type: ignore[misc]
    with pytest.raises(PipelineError, match=r"bounds=True"):
        keyed.window(size_ms=10, name="plain").count().top(1, by=lambda w: w)  # type: ignore[misc]
    with pytest.raises(PipelineError, match="session windows"):
        keyed.window(gap_ms=10, bounds=True, name="s").count().top(1, by=lambda w: w["value"])
    windowed = keyed.window(size_ms=10, bounds=True, name="w").count()
    with pytest.raises(PipelineError, match="results of a windowed aggregation"):
        windowed.map(lambda w: w).top(1, by=lambda w: w["value"])
    for n, ties, match in [(0, True, "positive"), (1.5, True, "positive"), (1, 1, "ties")]:
        with pytest.raises(PipelineError, match=match):
            windowed.top(n, by=lambda w: w["value"], ties=ties)  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="expected a function"):
        windowed.top(1, by=3)  # type: ignore[arg-type]


# -- top of the values of each window ------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("n", "ties"), [(1, True), (3, False), (3, True)])
@pytest.mark.parametrize("seed", range(2))
def test_top_values_per_window_over_the_whole_stream_and_per_key(
    seed: int, n: int, ties: bool, layout: tuple[int, int, int]
) -> None:
    records = _records(seed)
    size, slide = 50, 25
    p = Pipeline()
    source = _source(p)
    source.window_all(size_ms=size, slide_ms=slide).top(n, by=lambda r: r["v"], ties=ties).sink(
        "out"
    )
    per_key = source.key_by(lambda r: r["k"]).window(size_ms=size, bounds=True)
    per_key.top(n, by=lambda r: r["v"], ties=ties).sink("per-key")
    driver = _drive(p, records, layout)
    everything: dict[int, list[Row]] = defaultdict(list)
    keyed: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in records:
        for start in _starts(r["ts"], size, slide):
            everything[start].append(r)
        keyed[r["k"], r["ts"] - r["ts"] % size].append(r)
    got = _by_window(_values(driver))
    assert set(got) == {(s, s + size) for s in everything}
    for start, rows in everything.items():
        want = _best(rows, n, lambda r: r["v"], ties)
        assert got[start, start + size] == [
            {"key": None, "start": start, "end": start + size, "value": r} for r in want
        ]
    got_keyed = sorted(json.dumps(w, sort_keys=True) for w in _values(driver, "per-key"))
    assert got_keyed == sorted(
        json.dumps({"key": k, "start": s, "end": s + size, "value": r}, sort_keys=True)
        for (k, s), rows in keyed.items()
        for r in _best(rows, n, lambda r: r["v"], ties)
    )


def test_top_values_of_sessions_merge_their_best() -> None:
    p = Pipeline()
    sessions = _source(p).key_by(lambda r: r["k"]).window(gap_ms=10, bounds=True)
    sessions.top(1, by=lambda r: r["v"]).map(
        lambda w: [w["start"], w["end"], w["value"]["v"]]
    ).sink("out")
    records = [{"k": "a", "v": v, "ts": t} for v, t in [(3, 0), (5, 20), (4, 5), (1, 12), (9, 40)]]
    driver = _drive(p, records, (1, 1, 1))
    # 0 and 5 are one session, 20 another, until 12 (sent after them) bridges all three.
    assert _values(driver) == [[0, 30, 5], [40, 50, 9]]


def test_a_failing_by_is_a_dead_record_and_the_window_goes_on() -> None:
    p = Pipeline()
    _source(p).window_all(size_ms=10).top(1, by=lambda r: 10 // r["v"]).map(
        lambda w: w["value"]["v"]
    ).sink("out")
    driver = Driver(p)
    for v in (5, 0, 2):
        driver.send("in", {"k": "a", "v": v, "ts": 1})
    driver.finish()
    assert _values(driver) == [2]
    assert len(driver.dead_records()) == 1
