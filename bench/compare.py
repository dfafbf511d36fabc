"""Word count, the three-stage pipeline (bench/pipelines/three_stage.py) and word count with
``count(emit="record")`` (``emit_record``: bench/pipelines/wordcount_emit_record.py), on this
checkout's engine and on other checkouts', interleaved on one broker: words/s, CPU and
checkpoint durations.

Per pipeline, one corpus (bench/run.py's: seeded Zipf lines, 4 partitions; ``--words`` for word
count, ``--three-stage-words`` and ``--emit-record-words`` for the slower ones, so that each
runs long enough) is produced once into an input topic; every run is a fresh job (its own name,
so its own consumer group, shuffle topics and state) that reads that topic from the beginning as a
full backlog and writes its own output topics, verified exact (read_committed, every key's
last value) before its figures count. The figures are bench/run.py's throughput phase, run
after run in rounds (``--runs`` once per round), so that the machine's load falls on every
variant alike; the summary gives medians.

    python bench/compare.py --port 21292 --engine old=/path/to/old/checkout \\
        --words 10000000 --rounds 3 --runs old:wordcount,this:wordcount
    python bench/compare.py --port 21292 --words 10000000 --three-stage-words 1000000 \\
        --rounds 3 --runs this:wordcount,this:three_stage

``--engine NAME=DIR``: the engine of another checkout (with its own ``.venv``: ``git worktree
add DIR COMMIT && (cd DIR && bash deploy/setup.sh)``); ``this``: this checkout. Writes
``<results-dir>/<timestamp>-compare.json``; the summary table goes to stderr and its JSON is
the last line on stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness.common import say  # noqa: E402
from bench.harness.measure import OutputWatcher, create_topic, exact_counts, produce_all  # noqa: E402
from bench.harness.modes import INTERVAL_MS, PARALLELISM, PARTITIONS, RESULTS  # noqa: E402
from bench.harness.phases import throughput_run  # noqa: E402
from bench.harness.provenance import source_version  # noqa: E402
from bench.peers.base import Job  # noqa: E402
from bench.peers.processor_peer import ProcessorPeer  # noqa: E402
from processor.commands import corpus  # noqa: E402
from processor.localkafka.broker import LocalBroker  # noqa: E402

PIPELINES = ("wordcount", "three_stage", "emit_record")
THREE_STAGE = Path(__file__).resolve().parent / "pipelines" / "three_stage.py"
EMIT_RECORD = Path(__file__).resolve().parent / "pipelines" / "wordcount_emit_record.py"


class Corpus:
    def __init__(self, words: int) -> None:
        text = list(corpus.lines(words, seed=1))
        self.lines = [line.encode() for line in text]
        self.counts = dict(exact_counts(text))
        # The three-stage pipeline's second output: distinct words per first character.
        self.distinct = dict(collections.Counter(word[0] for word in self.counts))
        self.words = sum(self.counts.values())


def run_one(
    engine: str,
    pipeline: str,
    checkout: Path | None,
    broker: LocalBroker,
    data: Corpus,
    input_topic: str,
    workdir: Path,
    label: str,
    timeout: float,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``settings``: PROCESSOR_* variables of a variant of this checkout's engine."""
    bootstrap = broker.bootstrap
    job_name = f"cmp-{label}"
    counts_topic = f"{job_name}.counts"
    letters_topic = f"{job_name}.letters"
    env: dict[str, str] = {}
    spec = ""
    if pipeline == "three_stage":
        spec = f"{THREE_STAGE}:pipeline"
        env = {
            "BENCH_INPUT_TOPIC": input_topic,
            "BENCH_COUNTS_TOPIC": counts_topic,
            "BENCH_LETTERS_TOPIC": letters_topic,
        }
    elif pipeline == "emit_record":
        spec = f"{EMIT_RECORD}:pipeline"  # a count per word: the uncombined path
    peer = ProcessorPeer(checkout, spec, {**env, **(settings or {})})
    job = Job(
        bootstrap=bootstrap,
        name=job_name,
        input_topic=input_topic,
        output_topic=counts_topic,
        workdir=workdir / label,
        interval_ms=INTERVAL_MS,
        parallelism=PARALLELISM,
        until_idle=True,
    )
    create_topic(bootstrap, counts_topic, PARTITIONS)
    watchers = [OutputWatcher(bootstrap, counts_topic, data.counts)]
    if pipeline == "three_stage":
        create_topic(bootstrap, letters_topic, PARTITIONS)
        watchers.append(OutputWatcher(bootstrap, letters_topic, data.distinct))
    for watcher in watchers:
        watcher.start()
    load_before = os.getloadavg()
    say(f"{label}: {engine} engine, {pipeline}, load {load_before[0]:.2f}")
    try:
        result = throughput_run(
            peer,
            job,
            watchers[0],
            broker,
            data.words,
            len(data.lines),
            timeout,
            also=watchers[1:],
        )
    finally:
        for watcher in watchers:
            watcher.close()
    result.update(
        {
            "engine": engine,
            "pipeline": pipeline,
            "label": label,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
    )
    result.pop("timeline", None)
    return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant (engine, pipeline): medians over its successful runs."""
    out: dict[str, Any] = {}
    variants = sorted({(r["engine"], r["pipeline"]) for r in runs})
    for engine, pipeline in variants:
        ok = [r for r in runs if (r["engine"], r["pipeline"]) == (engine, pipeline) and r["ok"]]
        failed = sum(
            1 for r in runs if (r["engine"], r["pipeline"]) == (engine, pipeline) and not r["ok"]
        )

        def med(values: list[Any], digits: int = 0) -> float | None:
            present = [v for v in values if v is not None]
            return round(statistics.median(present), digits) if present else None

        checkpoints = [r.get("checkpoint_summary") or {} for r in ok]
        out[f"{engine}:{pipeline}"] = {
            "words": ok[0]["words"] if ok else None,
            "runs": len(ok),
            "failed": failed,
            "words_per_s": [r["words_per_s"] for r in ok],
            "words_per_s_median": med([r["words_per_s"] for r in ok]),
            "processing_s_median": med([r["processing_s"] for r in ok], 1),
            "cpu_s_per_million_words_median": med([r["cpu_s_per_million_words"] for r in ok], 2),
            "other_cpu_s_median": med([r["other_cpu_s_until_exact"] for r in ok], 1),
            "loadavg_1m_before": [r["loadavg_before"][0] for r in ok],
            "checkpoints_median": med([c.get("completed") for c in checkpoints]),
            "checkpoint_ms_p50_median": med([c.get("duration_ms_p50") for c in checkpoints], 1),
            "checkpoint_ms_p99_median": med([c.get("duration_ms_p99") for c in checkpoints], 1),
            "checkpoint_sync_cpu_pct_median": med(
                [(r.get("checkpoint_blocking") or {}).get("cpu_pct") for r in ok], 1
            ),
        }
    return out


def ratios(summary: dict[str, Any], base: str) -> dict[str, float]:
    """Every engine's word count words/s median over ``base``'s."""
    of = {k.split(":")[0]: v["words_per_s_median"] for k, v in summary.items()}
    out: dict[str, float] = {}
    for key, value in summary.items():
        engine, pipeline = key.split(":")
        if pipeline == "wordcount" and engine != base and of.get(base) and value["runs"]:
            out[f"{engine}/{base}"] = round(value["words_per_s_median"] / of[base], 3)
    return out


def table(result: dict[str, Any]) -> str:
    rows = [
        "| variant | runs | words/s median (each) | processing s | CPU s / M words "
        "| checkpoints | duration p50 / p99 ms | sync CPU % | load 1m before |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, s in result["summary"].items():
        each = ", ".join(f"{w:,}" for w in s["words_per_s"])
        rows.append(
            f"| {name} | {s['runs']} ({s['failed']} failed) | {s['words_per_s_median'] or 0:,.0f} "
            f"({each}) | {s['processing_s_median']} | {s['cpu_s_per_million_words_median']} "
            f"| {s['checkpoints_median']} | {s['checkpoint_ms_p50_median']} / "
            f"{s['checkpoint_ms_p99_median']} | {s['checkpoint_sync_cpu_pct_median']} "
            f"| {', '.join(f'{x:.1f}' for x in s['loadavg_1m_before'])} |"
        )
    for name, ratio in result.get("wordcount_ratios", {}).items():
        rows.append(f"\nword count words/s medians, {name}: {ratio}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=29092, help="broker port (controller +1)")
    parser.add_argument("--data-dir", type=Path, help="broker data (default: a temp dir)")
    parser.add_argument("--words", type=int, default=10_000_000, help="word count's corpus")
    parser.add_argument(
        "--three-stage-words", type=int, default=1_000_000, help="the three-stage's corpus"
    )
    parser.add_argument(
        "--emit-record-words", type=int, default=2_000_000, help="emit_record's corpus"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--runs",
        default="this:wordcount,this:three_stage",
        help="engine:pipeline, comma-separated, run in this order every round "
        f"(engines: this and those of --engine; pipelines: {', '.join(PIPELINES)})",
    )
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another checkout's engine (DIR has its .venv), run as NAME",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=VAR=VALUE[,VAR=VALUE]",
        help="this checkout's engine with settings, run as NAME "
        "(e.g. unaligned=PROCESSOR_CHECKPOINT_ALIGNMENT=unaligned)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="per run, to exact output")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    checkouts: dict[str, Path | None] = {"this": None}
    for spec in args.engine:
        name, _, path = spec.partition("=")
        if not name or not (Path(path) / ".venv").is_dir():
            parser.error(f"--engine {spec}: want NAME=DIR, DIR a checkout with its .venv")
        checkouts[name] = Path(path).resolve()
    variants: dict[str, dict[str, str]] = {}
    for spec in args.variant:
        name, _, assignments = spec.partition("=")
        pairs = [a.split("=", 1) for a in assignments.split(",") if a]
        if not name or not pairs or any(len(p) != 2 for p in pairs):
            parser.error(f"--variant {spec}: want NAME=VAR=VALUE[,VAR=VALUE]")
        checkouts[name] = None
        variants[name] = dict((k, v) for k, v in pairs)
    runs = [tuple(r.strip().split(":", 1)) for r in args.runs.split(",") if r.strip()]
    for run in runs:
        if len(run) != 2 or run[0] not in checkouts or run[1] not in PIPELINES:
            parser.error(f"--runs: {':'.join(run)} is not engine:pipeline")
    sizes = {
        "wordcount": args.words,
        "three_stage": args.three_stage_words,
        "emit_record": args.emit_record_words,
    }

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    tmp = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    data_dir = args.data_dir or tmp / "kafka"
    if args.data_dir is not None:
        shutil.rmtree(data_dir, ignore_errors=True)  # a fresh broker every time
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=data_dir)
    report: dict[str, Any] = {
        "timestamp": stamp,
        "command": "python bench/compare.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "source": source_version(),
        "engines": {name: str(path) if path else str(ROOT) for name, path in checkouts.items()},
        "variants": variants,
        "corpus": {},
        "runs": [],
    }
    data: dict[str, Corpus] = {}
    for pipeline in sorted({p for _, p in runs}):
        say(f"{pipeline} corpus: {sizes[pipeline]:,} words, seed 1")
        data[pipeline] = Corpus(sizes[pipeline])
    try:
        say(f"starting the broker on {broker.bootstrap} (data in {data_dir})")
        broker.start()
        for pipeline, corpus_of in data.items():
            topic = f"compare-{stamp}.{pipeline.replace('_', '-')}.input"
            report["corpus"][pipeline] = {
                "topic": topic,
                "words": corpus_of.words,
                "lines": len(corpus_of.lines),
                "distinct": len(corpus_of.counts),
            }
            create_topic(broker.bootstrap, topic, PARTITIONS)
            say(f"producing {corpus_of.words:,} words ({len(corpus_of.lines):,} lines) to {topic}")
            produce_all(broker.bootstrap, topic, corpus_of.lines, PARTITIONS)
        for round_no in range(args.rounds):
            for engine, pipeline in runs:
                label = f"{stamp.replace('-', '')}-{round_no}-{engine}-{pipeline}".replace("_", "")
                result = run_one(
                    engine,
                    pipeline,
                    checkouts[engine],
                    broker,
                    data[pipeline],
                    report["corpus"][pipeline]["topic"],
                    tmp,
                    label,
                    args.timeout,
                    variants.get(engine),
                )
                report["runs"].append(result)
                time.sleep(2)  # let the stopped job's processes and the broker settle
    finally:
        say("stopping the broker")
        broker.stop()
    report["summary"] = summary(report["runs"])
    # Against the first engine of --runs (the baseline, e.g. an older commit).
    report["wordcount_ratios"] = ratios(report["summary"], str(runs[0][0]))
    failed = any(not r["ok"] for r in report["runs"])
    if failed:
        say(f"kept {tmp} (logs)")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"{stamp}-compare.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report), file=sys.stderr)
    say(f"wrote {out}")
    print(json.dumps(report["summary"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
