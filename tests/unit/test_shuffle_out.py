"""What an uncombined `ShuffleOut` ships. Its key texts are `key_text`'s, whichever way it
makes them (plain strings and ints inline, the rest through `key_text`), in a timed pipeline
and not; a key no record can carry is dead, the others go on. A large body is cut into
records of at most `MAX_RECORD_BYTES` by the size of the last ones, every item once, in
order."""

from __future__ import annotations

from typing import Any

import pytest

from processor import Pipeline
from processor.api.ops import key_text
from processor.engine.shuffle_out import MAX_RECORD_BYTES, ShuffleOut
from processor.models.records import decode_shuffle
from processor.plan.stages import plan

KEYS: list[Any] = ["a", "\0x", "é", 1, -7, 0, True, 2.5, [1, "b"], {"z": 1, "a": 2}, None]
TOO_LONG = 10**5000  # no text: over 4,300 digits


def _shuffle(timed: bool, dead: list[Any]) -> ShuffleOut:
    p = Pipeline()
    src = p.source("w", value="json", timestamp=(lambda v: 0) if timed else None)
    src.key_by(lambda v: v).count(emit="record").sink("o")  # uncombined
    compiled = plan(p)
    node = compiled.stages[0].shuffles[0]
    return ShuffleOut(
        node, compiled.target(node), 3, 32768, lambda n, e, v: dead.append(v), combine=True
    )


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("too_long", [False, True])
def test_uncombined_key_texts_are_key_texts(timed: bool, too_long: bool) -> None:
    dead: list[Any] = []
    shuffle = _shuffle(timed, dead)
    keys = [*KEYS, TOO_LONG] if too_long else KEYS
    values = list(range(len(keys)))
    if timed:
        shuffle.add(keys, values, times=[5] * len(keys))
    else:
        shuffle.add(keys, values)
    shipped = [item for _, v in shuffle.take(0) for item in decode_shuffle(v)[1]]
    assert sorted(item[1] for item in shipped) == list(range(len(KEYS)))
    assert {item[1]: item[0] for item in shipped} == {i: key_text(k) for i, k in enumerate(KEYS)}
    assert dead == ([len(KEYS)] if too_long else [])


def test_plain_string_keys_with_a_nul_inside_are_tagged_only_at_the_start() -> None:
    dead: list[Any] = []
    shuffle = _shuffle(False, dead)
    keys = ["a\0b", "\0c", "d"]
    shuffle.add(keys, [0, 1, 2], all_str=True)
    shipped = [item for _, v in shuffle.take(0) for item in decode_shuffle(v)[1]]
    assert {item[1]: item[0] for item in shipped} == {i: key_text(k) for i, k in enumerate(keys)}


def test_large_bodies_are_cut_into_records_every_item_once_in_order() -> None:
    dead: list[Any] = []
    shuffle = _shuffle(False, dead)
    for round_ in range(3):  # the first take learns the size of an item, the next use it
        words = [f"w{i % 5000}-{round_}" for i in range(200_000)]
        shuffle.add(words, list(range(len(words))), all_str=True)
        taken = shuffle.take(0)
        assert all(len(v) <= MAX_RECORD_BYTES for _, v in taken)
        assert len(taken) > 3
        by_partition: dict[int, list[Any]] = {}
        for p, v in taken:
            by_partition.setdefault(p, []).extend(item[1] for item in decode_shuffle(v)[1])
        assert sorted(i for items in by_partition.values() for i in items) == list(
            range(len(words))
        )
        assert all(items == sorted(items) for items in by_partition.values())
    assert dead == []
