"""Word count with ``count(emit="record")``
(``--pipeline bench/pipelines/wordcount_emit_record.py``): one output record per input word,
the work the peers' per-word updates do.

The built-in word count emits each changed word's count once per checkpoint and lets the
source tasks pre-aggregate each epoch; with ``emit="record"`` nothing is combined: every word
crosses the shuffle and every word's new count is written. The topics are the job's
(``PROCESSOR_INPUT_TOPIC``, ``PROCESSOR_OUTPUT_TOPIC``, as bench/peers/processor_peer.py sets
them); the tokenizer is word count's.
"""

from __future__ import annotations

import os

from processor.api.streams import Pipeline
from processor.jobs.wordcount import line_words, words


def wordcount_emit_record(job: str, input_topic: str, output_topic: str) -> Pipeline:
    # The job's name is the bench's (its consumer group is what the bench measures).
    pipeline = Pipeline(name=job)
    (
        pipeline.source(input_topic, value="text", name="split")
        .flat_map(line_words, name="words", batched=words)
        .key_by(str, name="count")
        .count(name="counts", emit="record")
        .sink(output_topic, name="output")
    )
    return pipeline


pipeline = wordcount_emit_record(
    os.environ.get("PROCESSOR_JOB_NAME", "wordcount-emit-record"),
    os.environ.get("PROCESSOR_INPUT_TOPIC", "input"),
    os.environ.get("PROCESSOR_OUTPUT_TOPIC", "output"),
)
