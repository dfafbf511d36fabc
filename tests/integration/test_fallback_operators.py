"""A fallback restore replays the epochs between an older snapshot and the committed checkpoint
quietly: the operators after an aggregation, a window or a join in the same stage must get its
output too, in the order the first run gave it, early flushes included. Each test puts a
first-sight ``process`` and a running ``reduce`` after one of them (after a window's count, a
``process`` whose event-time timer reports the count later; after a ``regroup``, which keeps
state in two stages, both fall back); mid-stream both workers are SIGKILLed and each keyed
task loses its committed snapshot and the two before, so that the replay spans three epochs.
An independent read_committed reader then finds every key fired once, each of the reduce's
updates the one before plus the update that produced it (a reduce set back to the older
snapshot is not), and the totals those of a direct computation.

The timed pipelines' sources never go idle, and nothing may come late: the feed pauses while
it waits for a checkpoint (around the kill; for a whole checkpoint timeout when an early write
hides a barrier, see test_early_write_lso.py), and a source idle by then would let the
watermark pass records still to be read (late, so missing from the windows' counts and the
pairs, by timing rather than by the replay: #44's held-back changes failed that way)."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from processor.plan.stages import plan
from processor.topics import LATE, job_topic
from tests.integration import after_join_pipeline as after_join
from tests.integration import after_regroup_pipeline as after_regroup
from tests.integration import after_window_pipeline as after_window
from tests.integration.after_count_pipeline import threshold
from tests.integration.pipeline_run import PipelineRun, read_committed, updates_per_key

PIPELINE = Path(__file__).resolve().parent / "after_count_pipeline.py"
WORDS = 40_000


# The snapshots each keyed task loses: its committed one and the two before, so that the
# replay spans three epochs (a window closed or a pair met in one of them, not by chance).
LOST = 3
CHUNKS, KILL_AFTER = 32, 20
WAIT_S = 240  # the longest the feed waits for a checkpoint
T = TypeVar("T")


def _pipeline_run(
    bootstrap: str, workdir: Path, module: Path, topics: list[str], flush_keys: int
) -> PipelineRun:
    """A run of ``module``'s build() on topics of its own (``topics``: its parameters), two
    keyed tasks a stage, epochs of 300 ms; ``flush_keys`` low enough for early flushes within
    every epoch, which the replay must find again. Its timed sources must not go idle while
    the feed waits for a checkpoint."""
    run = PipelineRun(
        bootstrap,
        workdir,
        module,
        {name: name for name in topics},
        shuffle_partitions="2",
        expected_workers="2",
        interval_ms=300,
        flush_keys=str(flush_keys),
        retained_checkpoints=str(LOST + 2),  # one more: a snapshot taken, not committed yet
    )
    for source in run.pipeline.sources:
        assert source.timestamp_fn is None or source.idle_ms > 2 * WAIT_S * 1000, source.name
    return run


def _lose_committed_snapshots(run: PipelineRun, stage: str) -> None:
    """The manifests of each keyed task's committed snapshot and of the ``LOST - 1`` before it,
    removed: the next start must fall back to an older one."""
    for partition in range(2):
        committed = run.committed_manifest(stage, partition)
        assert committed is not None, f"{stage}-{partition} committed nothing"
        task_dir = committed.parents[2]
        found = sorted(task_dir.glob("*/chk-*/_snapshot.json"), key=lambda m: m.parent.name)
        manifests = [m for m in found if m.parent.name <= committed.parent.name]
        assert len(manifests) > LOST, f"{stage}-{partition}: {len(manifests)} snapshots kept"
        # Newer ones too: a commit the killed worker had in flight may still complete (the
        # broker finishes it), and its snapshot must be lost as well, or there is no fallback.
        newer = [m for m in found if m.parent.name > committed.parent.name]
        for manifest in manifests[-LOST:] + newer:
            manifest.unlink()


def test_a_fallback_rebuilds_the_operators_after_a_count(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = _pipeline_run(
        kafka_bootstrap, tmp_path, PIPELINE, ["words", "counts", "firsts", "sums"], 40
    )
    stage = plan(run.pipeline).stages[1].name
    rng = random.Random(40)
    words = [f"w{rng.randrange(200)}".encode() for _ in range(WORDS)]
    _fall_back_mid_stream(run, stage, words, lambda chunk: run.send(run.topics["words"], chunk))
    _check(run, Counter(w.decode() for w in words))


def _fall_back_mid_stream(
    run: PipelineRun,
    stage: str | list[str],
    values: Sequence[T],
    send: Callable[[list[T]], None],
) -> None:
    """``values`` sent into the run's two workers in ``CHUNKS`` chunks, each once a checkpoint
    has completed since the one before (so that every few epochs carry records, however slow
    the machine); right after chunk ``KILL_AFTER`` both workers are SIGKILLed, ``stage``'s
    committed snapshots lost (each stage's, given several) and the workers started again;
    until every input is committed. Each of their tasks must have fallen back and replayed
    records. Stops the run."""
    stages = [stage] if isinstance(stage, str) else stage
    size = len(values) // CHUNKS + 1
    try:
        run.start(workers=2)
        run.wait_for_checkpoints(1, timeout=120)  # the job runs
        for i in range(CHUNKS):
            send(list(values[i * size : (i + 1) * size]))
            if i == KILL_AFTER:  # mid-stream: the epochs the fallback replays carry records
                for worker in range(2):
                    run.kill_worker(worker)
                for lost in stages:
                    _lose_committed_snapshots(run, lost)
                for worker in range(2):
                    run.start_worker(worker)
            run.wait_for_checkpoints(1, timeout=WAIT_S)
        run.drain(timeout=300)
        late = read_committed(run.bootstrap, job_topic(run.job, LATE))
        n = sum(map(len, late.values()))
        assert not n, f"{n} records late: a source went idle while the feed waited"
        logs = run.log("worker-0") + run.log("worker-1")
        for lost, partition in itertools.product(stages, range(2)):
            assert f"{lost}-{partition}: falling back to checkpoint" in logs
            assert f"{lost}-{partition}: replay after the fallback is done" in logs
        # The epochs replayed were not all empty: the checks see what the replay rebuilt.
        spans = re.findall(
            r"falling back to checkpoint (\d+) .*replaying up to barrier (\d+)", logs
        )
        records = _records_per_checkpoint(run)
        for older, committed in spans:
            replayed = range(int(older) + 1, int(committed) + 1)
            assert sum(records.get(c, 0) for c in replayed) > 0, f"empty replay {older}-{committed}"
    finally:
        run.stop()


def _records_per_checkpoint(run: PipelineRun) -> dict[int, int]:
    """The records each completed checkpoint carried, by id, in the order they completed."""
    done = re.findall(r"checkpoint (\d+) complete in \S+ (\d+) records", run.log("coordinator"))
    return {int(checkpoint): int(n) for checkpoint, n in done}


def _updates(run: PipelineRun, param: str) -> dict[str, list[Any]]:
    """Every update per key of build()'s sink ``param``, read committed, values decoded."""
    got = updates_per_key(read_committed(run.bootstrap, run.topics[param]))
    return {(k or b"").decode(): [json.loads(v) for v in vs] for k, vs in got.items()}


def _same(what: str, got: Mapping[str, object], want: Mapping[str, object]) -> None:
    wrong = [(k, got.get(k), want.get(k)) for k in sorted(got.keys() | want.keys())]
    wrong = [w for w in wrong if w[1] != w[2]]
    assert not wrong, f"{what}: {len(wrong)} keys differ (key, got, expected): {wrong[:4]}"


def _check(run: PipelineRun, total: Counter[str]) -> None:
    counts, sums, firsts = _updates(run, "counts"), _updates(run, "sums"), _updates(run, "firsts")
    assert {w: c[-1] for w, c in counts.items()} == dict(total)
    for word, changes in counts.items():
        running, expected = 0, []
        for count in changes:
            running += count
            expected.append(running)
        assert sums[word] == expected, f"{word}: the reduce went astray after the fallback"
    fired = {w: [threshold(w)] for w, n in total.items() if n >= threshold(w)}
    assert firsts == fired, "a first sight fired twice, or never"


REGROUP = Path(__file__).resolve().parent / "after_regroup_pipeline.py"


def test_a_fallback_rebuilds_a_regroup_and_the_operators_after_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Both the count's stage (the regroup's memory of each word's count) and the regroup's
    (each bucket's number of words, the process and the reduce after it) fall back."""
    topics = ["words", "buckets", "firsts", "sums"]
    run = _pipeline_run(kafka_bootstrap, tmp_path, REGROUP, topics, 40)
    stages = [s.name for s in plan(run.pipeline).stages if not s.is_source]
    assert stages == ["count-words", "per-bucket"]
    rng = random.Random(43)
    words = [f"w{rng.randrange(200)}" for _ in range(WORDS)]
    # Rare words, in the first and the last quarter only: the replay (before the kill, two
    # thirds in) updates none of them, so only the restored state knows which bucket each
    # is in when it comes again (a regroup that forgot would add it twice to bucket 0).
    for r in range(20):
        for at in (rng.randrange(WORDS // 4), rng.randrange(WORDS * 3 // 4, WORDS)):
            words[at:at] = [f"r{r}"] * 3
    sent = [w.encode() for w in words]
    _fall_back_mid_stream(run, stages, sent, lambda chunk: run.send(run.topics["words"], chunk))
    final = Counter(after_regroup.bucket(n) for n in Counter(words).values())
    assert final[0] == 20  # the rare words, 6 each
    buckets, sums = _updates(run, "buckets"), _updates(run, "sums")
    # Each bucket ends at its number of words; a bucket all its words left ends at 0.
    _same(
        "buckets",
        {b: u[-1] for b, u in buckets.items() if u[-1]},
        {str(b): n for b, n in final.items()},
    )
    for bucket, changes in buckets.items():
        assert sums[bucket] == list(itertools.accumulate(changes)), (
            f"{bucket}: the reduce went astray"
        )
    thresholds = {b: after_regroup.threshold(int(b)) for b in buckets}
    fired = {b: [thresholds[b]] for b, u in buckets.items() if max(u) >= thresholds[b]}
    assert fired, "no bucket fired: the check checks nothing"
    _same("firsts", _updates(run, "firsts"), fired)  # a first sight fired twice, or never


# Timed input: ``(topic parameter, record, partition)`` in event-time order per partition (no
# record is behind its partition's watermark, none is late), then one record per partition far
# ahead in event time, whose watermark closes every window of the data and fires every timer.
Timed = list[tuple[str, dict[str, Any], int]]
T0 = 1_700_000_000_000
CLOSING_KEY = "k999"


def _closing(params: list[str], last: int) -> Timed:
    record = {"k": CLOSING_KEY, "id": "end", "ts": last + 60_000}
    return [(param, record, partition) for param in params for partition in range(2)]


def _send_timed(run: PipelineRun) -> Callable[[Timed], None]:
    """What sends timed records into build()'s topics, in order."""

    def send(chunk: Timed) -> None:
        run.send_placed(
            (run.topics[param], json.dumps(record).encode(), partition, None)
            for param, record, partition in chunk
        )

    return send


WINDOWS = Path(__file__).resolve().parent / "after_window_pipeline.py"
# An event every 5 ms of event time, 2.5 s of it a chunk fed (an epoch or two): a numbering
# window spans ~3 chunks, every epoch closes counting windows, whose reports come ~12 later.
EVENTS, STEP_MS, KEYS = 16_000, 5, 10


def test_a_fallback_rebuilds_the_operators_after_a_window(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = ["events", "firsts", "sums", "counts", "reports"]
    run = _pipeline_run(kafka_bootstrap, tmp_path, WINDOWS, topics, 40)
    rng = random.Random(41)
    events: Timed = [
        ("events", {"k": f"k{rng.randrange(KEYS)}", "ts": T0 + i * STEP_MS}, i % 2)
        for i in range(EVENTS)
    ]
    events += _closing(["events"], T0 + EVENTS * STEP_MS)
    stage = plan(run.pipeline).stages[1].name
    _fall_back_mid_stream(run, stage, events, _send_timed(run))

    def windows(size: int) -> Counter[str]:
        return Counter(f"{e['k']}@{e['ts'] - e['ts'] % size}" for _, e, _ in events)

    numbered = windows(after_window.SIZE_MS)
    counted = windows(after_window.COUNT_SIZE_MS)
    closed = {w: n for w, n in counted.items() if not w.startswith(f"{CLOSING_KEY}@")}
    # The windowed process numbers each window's records 1, 2, 3...: the running reduce of the
    # numbers goes through triangular numbers to n(n+1)/2, and the first sight fires once.
    sums = _updates(run, "sums")
    assert sums.keys() == numbered.keys()
    for window, values in sums.items():
        n = numbered[window]
        assert values[-1] == n * (n + 1) // 2, f"{window}: the reduce went astray: {values}"
        roots = [math.isqrt(2 * v) for v in values]
        assert all(r * (r + 1) == 2 * v for r, v in zip(roots, values, strict=True)), (
            f"{window}: the reduce went astray: {values}"
        )
        assert roots == sorted(set(roots)), f"{window}: the reduce went back: {values}"
    thresholds = {w: after_window.threshold(w) for w in numbered}
    fired = {w: [thresholds[w]] for w, n in numbered.items() if n >= thresholds[w]}
    _same("firsts", _updates(run, "firsts"), fired)  # a first sight fired twice, or never
    # The windowed count emits each window once; the process after it reports it once, when
    # the timer it set fires (a count the replay forgot would set none).
    once = {w: [n] for w, n in closed.items()}
    _same("counts", _updates(run, "counts"), once)
    _same("reports", _updates(run, "reports"), once)


JOIN = Path(__file__).resolve().parent / "after_join_pipeline.py"
SIDES = 12_000  # of both sides, 0.75 a ms of event time: a record meets ~4 partners


def test_a_fallback_rebuilds_the_operators_after_a_join(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = ["lefts", "rights", "pairs", "firsts", "counts", "sums"]
    run = _pipeline_run(kafka_bootstrap, tmp_path, JOIN, topics, 20)  # of 30 keys
    rng = random.Random(42)
    records: Timed = []
    for i in range(SIDES):
        side = rng.choice(["lefts", "rights"])
        key, ts = f"k{rng.randrange(30)}", T0 + i * 4 // 3
        records.append((side, {"k": key, "id": f"{side[0]}{i}", "ts": ts}, i % 2))
    records += _closing(["lefts", "rights"], T0 + SIDES * 4 // 3)
    stage = plan(run.pipeline).stages[-1].name
    _fall_back_mid_stream(run, stage, records, _send_timed(run))

    within = after_join.WITHIN_MS
    by_key: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for side, record, _ in records:
        by_key.setdefault(record["k"], []).append((side, record))
    pairs: dict[str, Counter[str]] = {}
    for key, sides in by_key.items():
        lefts = [r for s, r in sides if s == "lefts"]
        rights = [r for s, r in sides if s == "rights"]
        pairs[key] = Counter(
            f"{left['id']}+{right['id']}"
            for left in lefts
            for right in rights
            if abs(left["ts"] - right["ts"]) <= within
        )
    pairs = {k: c for k, c in pairs.items() if c}
    _same("pairs", {k: Counter(v) for k, v in _updates(run, "pairs").items()}, pairs)
    total = Counter({k: sum(c.values()) for k, c in pairs.items()})
    counts, sums = _updates(run, "counts"), _updates(run, "sums")
    _same("counts", {k: c[-1] for k, c in counts.items()}, total)
    for key, changes in counts.items():
        assert sums[key] == list(itertools.accumulate(changes)), f"{key}: the reduce went astray"
    fired = {k: [after_join.threshold(k)] for k, n in total.items() if n >= after_join.threshold(k)}
    _same("firsts", _updates(run, "firsts"), fired)  # a first sight fired twice, or never
