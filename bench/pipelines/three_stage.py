"""The bench's three-stage pipeline (``--pipeline bench/pipelines/three_stage.py``): word
counts, and per first character the number of distinct words seen so far.

    split (source: lines -> words) -> word (keyed by word: count -> counts topic;
    process: first sight -> key_by first character) -> letter (count -> letters topic)

Two shuffles in a row, and the word stage is not combinable (its key_by feeds a count and a
process), so the source ships every word rather than partial counts: the general path of the
engine, next to word count's pre-aggregated one. The tokenizer is word count's.

Topics come from the environment (bench/compare.py sets them per run): BENCH_INPUT_TOPIC,
BENCH_COUNTS_TOPIC, BENCH_LETTERS_TOPIC.
"""

from __future__ import annotations

import os
from typing import Any

from processor.api.streams import Pipeline
from processor.jobs.wordcount import line_words, words


def first_sight(word: str, state: Any) -> list[str]:
    """The word, the first time its key is seen; nothing after that."""
    if state.get() is None:
        state.set(True)
        return [word]
    return []


def first_char(word: str) -> str:
    return word[0]


def three_stage_pipeline(input_topic: str, counts_topic: str, letters_topic: str) -> Pipeline:
    pipeline = Pipeline()
    by_word = (
        pipeline.source(input_topic, value="text", name="split")
        .flat_map(line_words, name="words", batched=words)
        .key_by(str, name="word")
    )
    by_word.count(name="counts").sink(counts_topic, name="counts-out")
    (
        by_word.process(first_sight, name="first-sight")
        .key_by(first_char, name="letter")
        .count(name="distinct")
        .sink(letters_topic, name="distinct-out")
    )
    return pipeline


pipeline = three_stage_pipeline(
    os.environ.get("BENCH_INPUT_TOPIC", "bench.input"),
    os.environ.get("BENCH_COUNTS_TOPIC", "bench.counts"),
    os.environ.get("BENCH_LETTERS_TOPIC", "bench.letters"),
)
