"""The pipeline of the fallback test of operators after an aggregation: per word, its count,
and in the same stage after the count a first-sight ``process`` (a word's record once, when
its count first reaches the word's threshold) and a running ``reduce`` of the count's updates.

Input records: words ``w0`` ... ``w199``. A replay that forgets the operators after the count
fires a word twice, and sets the reduce back.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline


def threshold(word: str) -> int:
    """Where ``word`` fires: spread over the run, so that words fire in every epoch."""
    return 5 + (int(word[1:]) * 37) % 240


def _first_sight(count: int, state: Any) -> list[Any]:
    if state.get() is None and count >= threshold(state.key):
        state.set(count)
        return [threshold(state.key)]
    return []


def build(
    words: str = "words", counts: str = "counts", firsts: str = "firsts", sums: str = "sums"
) -> Pipeline:
    p = Pipeline()
    count = p.source(words).key_by(str).count()
    count.sink(counts)
    count.process(_first_sight).sink(firsts)
    count.reduce(lambda total, update: total + update).sink(sums)
    return p
