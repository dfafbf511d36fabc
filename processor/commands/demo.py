"""``processor demo``: word count end to end on this machine, checked against a direct count.

Starts the local broker, writes a seeded corpus, loads it into a fresh input topic, runs the
coordinator and workers until all input is committed, then prints the top words and whether
every count is exact.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import threading
import time
import uuid
from pathlib import Path

from processor.commands import corpus
from processor.commands.counts import read_final_counts, top
from processor.commands.local import run_local
from processor.commands.produce import produce_lines
from processor.config import Settings
from processor.jobs.wordcount import words as extract_words
from processor.localkafka.broker import LocalBroker


def run_demo(settings: Settings, words: int, workers: int, k: int, env: dict[str, str]) -> int:
    broker = LocalBroker()
    if settings.bootstrap_servers == "127.0.0.1:9092":
        print("starting the local Kafka broker ...", flush=True)
        broker.start()
    run = uuid.uuid4().hex[:6]
    job = f"demo-{run}"
    env = {
        **env,
        "PROCESSOR_JOB_NAME": job,
        "PROCESSOR_INPUT_TOPIC": f"{job}.input",
        "PROCESSOR_OUTPUT_TOPIC": f"{job}.counts",
    }
    demo_settings = settings.model_copy(
        update={
            "job_name": job,
            "input_topic": env["PROCESSOR_INPUT_TOPIC"],
            "output_topic": env["PROCESSOR_OUTPUT_TOPIC"],
        }
    )
    with tempfile.TemporaryDirectory(prefix="processor-demo-") as tmp:
        path = Path(tmp) / "corpus.txt"
        print(f"writing a corpus of {words:,} words to {path} ...", flush=True)
        corpus.write(path, words)
        expected = collections.Counter(extract_words(path.read_text(encoding="utf-8").splitlines()))
        produce_lines(demo_settings, demo_settings.input_topic, [path], partitions=4)
        print(
            f"running job {job} with {workers} workers until all input is committed ...", flush=True
        )
        started = time.monotonic()
        code = run_local(workers, env, threading.Event(), until_idle=True)
        took = time.monotonic() - started
    if code != 0:
        print(f"the job failed (exit code {code})")
        return code
    final = read_final_counts(demo_settings, demo_settings.output_topic)
    print(
        f"\ntop {k} words of {sum(final.values()):,} ({took:.1f}s including start and idle wait):"
    )
    for word, count in top(final, k):
        print(f"{count:>12,}  {word}")
    wrong = {w for w in expected.keys() | final.keys() if expected.get(w) != final.get(w)}
    if wrong:
        print(f"MISMATCH: {len(wrong)} words differ from a direct count, e.g. {sorted(wrong)[:5]}")
        return 1
    print(f"all {len(expected):,} distinct words match a direct count exactly")
    return 0


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--words", type=int, default=2_000_000, help="words to feed (default: 2,000,000)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--top", type=int, default=15, help="words to show (default: 15)")


def run(args: argparse.Namespace) -> int:
    """``processor demo``."""
    from processor.commands import base

    settings = base.setup(args)
    return run_demo(settings, args.words, args.workers, args.top, base.child_env(args))
