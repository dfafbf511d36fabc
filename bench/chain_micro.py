"""Word count's two stages as `StageChain`s in one process, no broker: the per-batch cost of
the operators alone (what a refactor of `processor.engine.chain` must not slow down).

The split stage takes lines in batches of about ``--batch`` words (flat_map, key_by into the
combining `ShuffleOut`); each epoch (``--epoch`` batches) its shuffle records are taken,
decoded (untimed) and given to the count stage, which is then flushed (the counts into state
and the sink). Prints words/s of each run and the median of ``--runs`` runs, as JSON on stdout:
words per second of this process's CPU time, which other work on a shared machine disturbs
far less than the wall clock.

    python bench/chain_micro.py [--words 2000000] [--batch 10000] [--epoch 20] [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import say
from processor.commands.corpus import lines
from processor.engine.chain import StageChain
from processor.jobs.wordcount import wordcount_pipeline
from processor.models.records import decode_shuffle
from processor.plan.stages import plan
from processor.testing import MemoryState

_PARTITIONS = 4


def _batches(words: int, batch_words: int) -> list[list[str]]:
    """The corpus's lines in batches of at least ``batch_words`` words."""
    batches: list[list[str]] = []
    current: list[str] = []
    count = 0
    for line in lines(words, seed=1):
        current.append(line)
        count += line.count(" ") + 1
        if count >= batch_words:
            batches.append(current)
            current, count = [], 0
    if current:
        batches.append(current)
    return batches


def _one_run(batches: list[list[str]], epoch: int) -> tuple[float, int]:
    """CPU seconds in the chains (decoding the shuffle records excluded) and sink records made."""
    compiled = plan(wordcount_pipeline("micro", "micro.input", "micro.output"))
    split_stage, count_stage = compiled.stages
    shuffle = split_stage.shuffles[0].name
    partitions = {shuffle: _PARTITIONS}
    split = StageChain(compiled, split_stage, 0, MemoryState(), partitions)
    counts = [
        StageChain(compiled, count_stage, p, MemoryState(), partitions) for p in range(_PARTITIONS)
    ]
    spent, records = 0.0, 0
    for start in range(0, len(batches), epoch):
        began = time.process_time()
        for batch in batches[start : start + epoch]:
            split.values(batch)
        split.flush()
        taken = split.shuffles[shuffle].take(0)
        spent += time.process_time() - began
        bodies = [(p, decode_shuffle(value)[1]) for p, value in taken]
        began = time.process_time()
        for partition, body in bodies:
            counts[partition].shuffled(body)
        for chain in counts:
            chain.flush()
            records += sum(map(len, chain.take_sinks().values()))
        spent += time.process_time() - began
    return spent, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=10_000, help="words per source batch")
    parser.add_argument("--epoch", type=int, default=20, help="batches per checkpoint")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    say(f"corpus: {args.words:,} words")
    batches = _batches(args.words, args.batch)
    words = sum(line.count(" ") + 1 for batch in batches for line in batch)
    rates: list[float] = []
    for run in range(args.runs):
        gc.collect()  # each run starts without the last one's garbage
        seconds, records = _one_run(batches, args.epoch)
        rates.append(words / seconds)
        say(f"run {run + 1}: {words / seconds:,.0f} words/s ({seconds:.3f} s, {records} records)")
    median = statistics.median(rates)
    say(f"median: {median:,.0f} words/s")
    print(json.dumps({"words": words, "rates": [round(r) for r in rates], "median": round(median)}))


if __name__ == "__main__":
    main()
