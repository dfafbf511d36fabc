"""The ported EOS test's checks (tests/eos/checks.py): they accept the output of the EOS
pipeline run in memory by the engine's stage code, and catch each kind of broken output
(a reordered, lost or repeated echo record; a repeated, lost or wrong update; an update in
another partition)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

import pytest

from processor.models.murmur2 import partition_of
from processor.testing import Driver
from tests.eos.checks import (
    AGGREGATES,
    Partitions,
    Record,
    Tally,
    align,
    check_aggregate,
    check_echo,
    running,
)
from tests.eos.pipeline import build

PARTITIONS = 3


def _by_partition(records: Sequence[Record]) -> dict[int, list[Record]]:
    """Records where a murmur2 producer (or a sink) puts them: by key."""
    out: dict[int, list[Record]] = defaultdict(list)
    for key, value in records:
        out[partition_of(key or b"", PARTITIONS)].append((key, value))
    return dict(out)


@pytest.fixture(scope="module")
def run() -> tuple[dict[int, list[Record]], dict[str, dict[int, list[Record]]]]:
    """500 records of 30 keys through the pipeline: the input and each output, per partition."""
    rng = random.Random(5)
    inputs = [
        (str(rng.randrange(30)).encode(), str(rng.randrange(10_000)).encode()) for _ in range(500)
    ]
    driver = Driver(
        build(), partitions=PARTITIONS, source_partitions=PARTITIONS, checkpoint_every=37
    )
    for key, value in inputs:
        driver.send("data", value, key=key)
    driver.finish()
    outputs = {topic: _by_partition(driver.raw_output(topic)) for topic in ("echo", *AGGREGATES)}
    return _by_partition(inputs), outputs


def _all(data: Partitions, outputs: dict[str, dict[int, list[Record]]]) -> Tally:
    tally = check_echo(data, outputs["echo"])
    for kind in AGGREGATES:
        tally.add(check_aggregate(kind, data, outputs[kind]))
    return tally


def test_the_pipelines_output_passes(
    run: tuple[Partitions, dict[str, dict[int, list[Record]]]],
) -> None:
    data, outputs = run
    tally = _all(data, outputs)
    assert tally.ok, tally.examples
    assert tally.verified == 500 * 5  # every record in echo and in each aggregate


def test_running_aggregates() -> None:
    values = [5, 7, 3, 9]
    assert running("min", values) == [5, 5, 3, 3]
    assert running("max", values) == [5, 7, 7, 9]
    assert running("sum", values) == [5, 12, 15, 24]
    assert running("cnt", values) == [1, 2, 3, 4]


def test_a_reordered_echo_partition_is_wrong(
    run: tuple[Partitions, dict[str, dict[int, list[Record]]]],
) -> None:
    data, outputs = run
    echo = {p: list(records) for p, records in outputs["echo"].items()}
    echo[1][10], echo[1][11] = echo[1][11], echo[1][10]
    tally = check_echo(data, echo)
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 1)
    assert any("out of order" in example for example in tally.examples)


def test_a_lost_and_a_repeated_echo_record(
    run: tuple[Partitions, dict[str, dict[int, list[Record]]]],
) -> None:
    data, outputs = run
    echo = {p: list(records) for p, records in outputs["echo"].items()}
    del echo[0][20]
    echo[2].insert(30, echo[2][29])
    tally = check_echo(data, echo)
    assert (tally.lost, tally.duplicated, tally.wrong) == (1, 1, 0)


def test_a_replayed_update_is_a_duplicate() -> None:
    """What a job without transactions writes after a crash: the updates since its last
    checkpoint again, from the state of that checkpoint."""
    data = {0: [(b"k", b"5"), (b"k", b"3"), (b"k", b"4")]}
    replayed = {0: [(b"k", b"1"), (b"k", b"2"), (b"k", b"2"), (b"k", b"3")]}
    tally = check_aggregate("cnt", data, replayed)
    assert (tally.verified, tally.duplicated, tally.lost, tally.wrong) == (3, 1, 0, 0)


def test_lost_wrong_and_misplaced_updates() -> None:
    data = {0: [(b"k", b"5"), (b"k", b"3"), (b"k", b"4")], 1: [(b"j", b"1")]}
    assert (
        check_aggregate("sum", data, {0: [(b"k", b"5"), (b"k", b"12")], 1: [(b"j", b"1")]}).lost
        == 1
    )
    wrong = check_aggregate(
        "sum", data, {0: [(b"k", b"5"), (b"k", b"9"), (b"k", b"12")], 1: [(b"j", b"1")]}
    )
    assert (wrong.verified, wrong.wrong, wrong.lost) == (3, 1, 0)
    misplaced = check_aggregate(
        "sum", data, {0: [(b"k", b"5"), (b"k", b"8"), (b"k", b"12"), (b"j", b"1")]}
    )
    assert (misplaced.wrong, misplaced.lost) == (1, 1)
    assert (
        check_aggregate(
            "sum", data, {0: [(b"k", b"5"), (b"k", b"x"), (b"k", b"12")], 1: [(b"j", b"1")]}
        ).wrong
        == 1
    )


def test_align_counts_each_outcome() -> None:
    assert align([1, 2, 3], [1, 2, 3]).ok
    tally = align([1, 2, 3, 4], [1, 3, 3, 9])
    assert (tally.verified, tally.lost, tally.duplicated, tally.wrong) == (2, 1, 1, 1)
