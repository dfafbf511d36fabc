"""The chaos run's pipeline with an operator after an aggregation in one stage: word counts,
and after the count a ``process`` that emits each power of ten a word's count reaches, once.

The process sees the count's updates: a replay that does not hand them on (a fallback to an
older snapshot) leaves it behind, and it emits a milestone again.
"""

import re
from typing import Any

from processor import Pipeline

WORD = re.compile(r"\w+")


def milestones(count: int, state: Any) -> list[int]:
    """Each power of ten from 10 up that ``count`` reached since the last one emitted."""
    reached = state.get(1)
    out = []
    while reached * 10 <= count:
        reached *= 10
        out.append(reached)
    if out:
        state.set(reached)
    return out


def build(
    lines: str = "lines", counts: str = "word-counts", reached: str = "word-milestones"
) -> Pipeline:
    pipeline = Pipeline()
    words = pipeline.source(lines, value="text").flat_map(lambda line: WORD.findall(line.lower()))
    count = words.key_by(lambda word: word).count()
    count.sink(counts)
    count.process(milestones).sink(reached)
    return pipeline


pipeline = build()
