"""Word count, the built-in pipeline: the words of each line (``re.findall(r"\\w+",
line.lower())``), counted per word.

It is an ordinary pipeline; its names keep the task ids (``split-N``, ``count-N``), shuffle
topic (``<job>.shuffle``) and so the transactional ids and snapshots that deployments of
word count had before pipelines existed.
"""

from __future__ import annotations

import re

from processor.api.node import KeyByNode
from processor.api.streams import Pipeline
from processor.topics import shuffle_topic

_WORD = re.compile(r"\w+")


def words(lines: list[str]) -> list[str]:
    # One regex pass over the whole batch: \w never matches the newline that joins the lines.
    return _WORD.findall("\n".join(lines).lower())


def line_words(line: str) -> list[str]:
    return _WORD.findall(line.lower())


def wordcount_pipeline(job_name: str, input_topic: str, output_topic: str) -> Pipeline:
    pipeline = Pipeline()
    keyed = (
        pipeline.source(input_topic, value="text", name="split")
        .flat_map(line_words, name="words", batched=words)
        .key_by(str, name="count")
    )
    assert isinstance(keyed.node, KeyByNode)
    keyed.node.topic = shuffle_topic(job_name, "shuffle")
    keyed.count(name="counts").sink(output_topic, name="output")
    return pipeline
