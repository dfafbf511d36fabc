"""Word count: the words of each line of ``lines``, counted, into ``word-counts``.

processor local --pipeline examples/wordcount.py:pipeline --workers 2
"""

import re

from processor import Pipeline

WORD = re.compile(r"\w+")


def build(lines="lines", counts="word-counts"):
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    pipeline = Pipeline()
    (
        pipeline.source(lines, value="text")
        .flat_map(lambda line: WORD.findall(line.lower()))
        .key_by(lambda word: word)
        .count()
        .sink(counts)
    )
    return pipeline


pipeline = build()
