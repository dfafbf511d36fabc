"""Two uses of one stream and two shuffles: word counts; every word once, the first time it
is seen (the first sight of a word is kept in that word's state); and per first letter the
number of distinct words seen so far."""

import re

from processor import Pipeline

WORD = re.compile(r"\w+")


def first_sight(word, state):
    """The word, the first time its key is seen; nothing after that."""
    if state.get() is None:
        state.set(True)
        return [word]
    return []


def build(
    lines="lines",
    counts="word-counts",
    new_words="new-words",
    per_letter="distinct-words-per-letter",
):
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    pipeline = Pipeline()
    words = pipeline.source(lines, value="text").flat_map(lambda line: WORD.findall(line.lower()))
    words.key_by(lambda word: word).count().sink(counts)
    first = words.key_by(lambda word: word).process(first_sight)
    first.sink(new_words)  # a plain stream, not a changelog: each word exactly once
    first.key_by(lambda word: word[0]).count().sink(per_letter)
    return pipeline


pipeline = build()
