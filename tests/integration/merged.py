"""Merges for tests/integration/test_merge.py: two topics of lines merged before a shuffle
(word counts: the count stage reads one shuffle written by both source stages), and keyed
streams of the two sources merged right after their key_bys (the first sight of each word:
an order-sensitive ``process`` whose key's records come from both inputs)."""

import re
from typing import Any

from processor import Pipeline

WORD = re.compile(r"\w+")


def first_sight(word: str, state: Any) -> list[str]:
    """The word, the first time its key is seen; nothing after that."""
    if state.get() is None:
        state.set(True)
        return [word]
    return []


def build(
    left: str = "left", right: str = "right", counts: str = "counts", new_words: str = "new-words"
) -> Pipeline:
    pipeline = Pipeline()
    a = pipeline.source(left, value="text")
    b = pipeline.source(right, value="text")
    words = a.merge(b).flat_map(lambda line: WORD.findall(line.lower()))
    words.key_by(lambda word: word).count().sink(counts)
    by_word_a = a.flat_map(lambda line: WORD.findall(line.lower())).key_by(lambda w: w)
    by_word_b = b.flat_map(lambda line: WORD.findall(line.lower())).key_by(lambda w: w)
    by_word_a.merge(by_word_b).process(first_sight).sink(new_words)
    return pipeline
