"""Word count: the words of each line of ``lines``, counted, into ``word-counts``.

processor local --pipeline examples/wordcount.py:pipeline --workers 2
"""

import re

from processor import Pipeline

WORD = re.compile(r"\w+")

pipeline = Pipeline()
(
    pipeline.source("lines", value="text")
    .flat_map(lambda line: WORD.findall(line.lower()))
    .key_by(lambda word: word)
    .count()
    .sink("word-counts")
)
