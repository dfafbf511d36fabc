"""Where one uncombined record's CPU time goes, step by step, in one process (issue #44).

Word count's two stages as `StageChain`s, as a source task and the keyed tasks run them,
with the real wire format, real RocksDB state (`RocksDBStore`) and a real librdkafka
producer for what the tasks produce (`AtLeastOnceOutput`: its ``produce``/``produce_many``,
the tasks' own path; without ``--bootstrap`` a producer whose broker never answers, so only
the enqueueing is measured, and its queue is purged each epoch). Per epoch of ``--epoch``
words each step is timed on this thread's CPU clock:

- ``decode``: the source's input lines, bytes to text (`SourceTask._decode`);
- ``source``: the split stage's chain: tokenize, key_by into its `ShuffleOut`;
- ``shuffle_take``: the `ShuffleOut`'s records: partitioning and encoding;
- ``shuffle_produce``: those records into the producer;
- ``shuffle_decode``: the keyed tasks' `decode_shuffle`;
- ``keyed``: the keyed chains' ``shuffled``: state reads (RocksDB multi_get), the fold, with
  ``emit="record"`` the update's sink encoding;
- ``flush``: the keyed chains' ``flush``: the epoch's state write (and, per checkpoint, the
  changed keys' sink records);
- ``sink_produce``: the sink records into the producer.

Modes: ``emit_record`` (bench/pipelines/wordcount_emit_record.py), ``no_combiner`` (word
count, ``PROCESSOR_COMBINE=false``), ``combined`` (word count as it runs by default).
``--pipeline FILE --events FILE`` instead runs any pipeline file (a Nexmark query:
examples/nexmark/q1.py; its ``build()`` on the topics ``nexmark`` and ``out``) over the lines
of a file (``nexmark --no-wait --number N > events.jsonl``) with `processor.testing.Driver`
(4 keyed tasks a stage, a checkpoint every ``--epoch`` events): CPU µs per event, and the
functions of a cProfile run. ``--checkout DIR`` imports the engine of another checkout (an
A/B against it, interleaved by the caller). ``--profile FILE`` runs one more epoch loop under
cProfile and prints its top functions by own time. JSON on stdout: µs per word per step,
medians over ``--runs``.

    python bench/experiments/per_record.py --mode emit_record --words 1000000 --runs 5
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import json
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _checkout() -> Path:
    """The checkout whose engine is imported: ``--checkout DIR`` or this one."""
    for i, arg in enumerate(sys.argv):
        if arg == "--checkout" and i + 1 < len(sys.argv):
            return Path(sys.argv[i + 1]).resolve()
        if arg.startswith("--checkout="):
            return Path(arg.split("=", 1)[1]).resolve()
    return Path(__file__).resolve().parents[2]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench
    sys.path.insert(0, str(_checkout()))  # processor, first

from confluent_kafka import Producer  # noqa: E402

from processor.api.streams import Pipeline  # noqa: E402
from processor.commands.corpus import lines  # noqa: E402
from processor.config import Settings  # noqa: E402
from processor.engine.chain import StageChain  # noqa: E402
from processor.jobs.wordcount import line_words, wordcount_pipeline, words  # noqa: E402
from processor.kafka import clients  # noqa: E402
from processor.kafka.output import AtLeastOnceOutput  # noqa: E402
from processor.models.records import decode_shuffle  # noqa: E402
from processor.plan.stages import plan  # noqa: E402
from processor.state.rocksdb.store import RocksDBStore  # noqa: E402
from processor.testing import Driver  # noqa: E402

STEPS = (
    "decode",
    "source",
    "shuffle_take",
    "shuffle_produce",
    "shuffle_decode",
    "keyed",
    "flush",
    "sink_produce",
)
_PARTITIONS = 4


def _emit_record() -> Pipeline:
    pipeline = Pipeline(name="per-record")
    (
        pipeline.source("pr.input", value="text", name="split")
        .flat_map(line_words, name="words", batched=words)
        .key_by(str, name="count")
        .count(name="counts", emit="record")
        .sink("pr.output", name="output")
    )
    return pipeline


def _batches(total: int, batch_words: int) -> list[list[bytes]]:
    """The corpus's lines, as the source reads them (bytes), in batches of about
    ``batch_words`` words (a consume batch of 5,000 lines holds about 60,000)."""
    batches: list[list[bytes]] = []
    current: list[bytes] = []
    count = 0
    for line in lines(total, seed=1):
        current.append(line.encode())
        count += line.count(" ") + 1
        if count >= batch_words:
            batches.append(current)
            current, count = [], 0
    if current:
        batches.append(current)
    return batches


class _Run:
    """One run's chains, state and producer."""

    def __init__(self, mode: str, bootstrap: str, workdir: Path) -> None:
        if mode == "emit_record":
            compiled = plan(_emit_record())
        else:
            compiled = plan(wordcount_pipeline("per-record", "pr.input", "pr.output"))
        combine = mode == "combined"
        split_stage, count_stage = compiled.stages
        self.shuffle = split_stage.shuffles[0].name
        partitions = {self.shuffle: _PARTITIONS}
        self.split = StageChain(compiled, split_stage, 0, _NoState(), partitions, combine=combine)
        self.stores = [RocksDBStore(workdir / f"db-{p}") for p in range(_PARTITIONS)]
        self.counts = [
            StageChain(compiled, count_stage, p, self.stores[p], partitions, combine=combine)
            for p in range(_PARTITIONS)
        ]
        settings = Settings(bootstrap_servers=bootstrap or "127.0.0.1:9")
        self.out = _Output(settings, "per-record")
        self.reachable = bool(bootstrap)

    def close(self) -> None:
        self.out._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.out._calls.shutdown()
        for store in self.stores:
            store.close()


class _Output(AtLeastOnceOutput):
    """The tasks' produce path on a producer without delivery callbacks (a transactional
    one has none either; purged records would call back here)."""

    def _make_producer(self, settings: Settings) -> Producer:
        return clients.producer(settings)


class _NoState:
    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [None] * len(keys)

    def write(self, items: Any) -> None:
        assert not items


def _epochs(run: _Run, batches: list[list[bytes]], per_epoch: int, spent: dict[str, float]) -> int:
    """Every batch through both stages, an epoch at a time; the step times into ``spent``;
    returns the sink records made."""
    clock: Callable[[], float] = time.thread_time
    out = run.out
    made = 0
    for start in range(0, len(batches), per_epoch):
        for batch in batches[start : start + per_epoch]:
            t0 = clock()
            values = [v.decode() for v in batch]
            t1 = clock()
            run.split.values(values)
            t2 = clock()
            spent["decode"] += t1 - t0
            spent["source"] += t2 - t1
        t0 = clock()
        run.split.flush()
        taken = run.split.shuffles[run.shuffle].take(0)
        t1 = clock()
        for p, value in taken:
            out.produce("pr.shuffle", value, partition=p)
        t2 = clock()
        spent["shuffle_take"] += t1 - t0
        spent["shuffle_produce"] += t2 - t1
        for p, value in taken:  # as a keyed task does: a record decoded, then applied
            a = clock()
            body = decode_shuffle(value)[1]
            b = clock()
            run.counts[p].shuffled(body)
            spent["shuffle_decode"] += b - a
            spent["keyed"] += clock() - b
            del body
        t0 = clock()
        for chain in run.counts:
            chain.flush()
        t1 = clock()
        for chain in run.counts:
            for topic, records in chain.take_sinks().items():
                out.produce_many(topic, records)
                made += len(records)
        t2 = clock()
        spent["flush"] += t1 - t0
        spent["sink_produce"] += t2 - t1
        if not run.reachable:  # nothing will ever send them: keep the queue from growing
            out._producer.purge(in_queue=True, in_flight=True, blocking=False)
        else:
            out._producer.flush(60)
    return made


def _pipeline_file(path: Path, events: list[bytes], epoch: int, profile: Path | None) -> None:
    """``path``'s ``build(events, output)`` pipeline over ``events`` in a `Driver`: CPU µs
    per event (and a cProfile run's top functions)."""
    spec = importlib.util.spec_from_file_location("per_record_pipeline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def one() -> float:
        driver = Driver(module.build("nexmark", "out"), partitions=4, checkpoint_every=epoch)
        began = time.process_time()
        for event in events:
            driver.send("nexmark", event)
        driver.finish()
        return time.process_time() - began

    spent = [one() for _ in range(3)]
    if profile is not None:
        profiler = cProfile.Profile()
        profiler.runcall(one)
        profiler.dump_stats(str(profile))
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    per_event = sorted(s * 1e6 / len(events) for s in spent)
    result = {"pipeline": str(path), "events": len(events), "us_per_event": per_event}
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode", choices=("emit_record", "no_combiner", "combined"), default="emit_record"
    )
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=60_000, help="words per source batch")
    parser.add_argument("--epoch", type=int, default=240_000, help="words per checkpoint")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap", default="", help="a broker (else none answers)")
    parser.add_argument("--checkout", type=Path, help="import the engine of this checkout")
    parser.add_argument(
        "--gc-threshold", help="gc.set_threshold(A, B, C) before the runs, as A,B,C"
    )
    parser.add_argument("--profile", type=Path, help="cProfile one more run into this file")
    parser.add_argument("--pipeline", type=Path, help="a pipeline file with build(input, out)")
    parser.add_argument("--events", type=Path, help="--pipeline's input: one record a line")
    args = parser.parse_args()
    if args.pipeline is not None:
        events = args.events.read_bytes().splitlines()
        _pipeline_file(args.pipeline, events, args.epoch, args.profile)
        return
    if args.gc_threshold:
        gc.set_threshold(*(int(x) for x in args.gc_threshold.split(",")))
    batches = _batches(args.words, args.batch)
    total = sum(len(words([line.decode() for line in batch])) for batch in batches)
    per_epoch = max(1, args.epoch // args.batch)
    runs: list[dict[str, float]] = []
    records = 0
    for _ in range(args.runs):
        gc.collect()
        workdir = Path(tempfile.mkdtemp(prefix="per-record-"))
        run = _Run(args.mode, args.bootstrap, workdir)
        spent = dict.fromkeys(STEPS, 0.0)
        try:
            records = _epochs(run, batches, per_epoch, spent)
        finally:
            run.close()
            shutil.rmtree(workdir, ignore_errors=True)
        runs.append({k: v * 1e6 / total for k, v in spent.items()})
        print(
            f"run: {sum(runs[-1].values()):.3f} µs/word "
            + " ".join(f"{k} {v:.3f}" for k, v in runs[-1].items()),
            file=sys.stderr,
        )
    if args.profile is not None:
        workdir = Path(tempfile.mkdtemp(prefix="per-record-"))
        run = _Run(args.mode, args.bootstrap, workdir)
        profiler = cProfile.Profile()
        try:
            profiler.runcall(_epochs, run, batches, per_epoch, dict.fromkeys(STEPS, 0.0))
        finally:
            run.close()
            shutil.rmtree(workdir, ignore_errors=True)
        profiler.dump_stats(str(args.profile))
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    medians = {k: round(statistics.median(r[k] for r in runs), 4) for k in STEPS}
    totals = [sum(r.values()) for r in runs]
    print(
        json.dumps(
            {
                "mode": args.mode,
                "gc_threshold": list(gc.get_threshold()),
                "checkout": str(_checkout()),
                "words": total,
                "sink_records": records,
                "us_per_word": medians,
                "total_us_per_word": round(statistics.median(totals), 4),
                "total_range": [round(min(totals), 4), round(max(totals), 4)],
                "words_per_cpu_s": round(1e6 / statistics.median(totals)),
            }
        )
    )


if __name__ == "__main__":
    main()
