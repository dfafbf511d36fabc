"""Two uses of one stream and two shuffles: word counts, and per first letter the number of
distinct words seen so far (the first sight of a word is kept in that word's state)."""

import re

from processor import Pipeline

WORD = re.compile(r"\w+")

pipeline = Pipeline()
words = pipeline.source("lines", value="text").flat_map(lambda line: WORD.findall(line.lower()))
words.key_by(lambda word: word).count().sink("word-counts")


def first_sight(word, state):
    """The word, the first time its key is seen; nothing after that."""
    if state.get() is None:
        state.set(True)
        return [word]
    return []


(
    words.key_by(lambda word: word)
    .process(first_sight)
    .key_by(lambda word: word[0])
    .count()
    .sink("distinct-words-per-letter")
)
