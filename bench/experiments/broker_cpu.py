"""What an uncombined job costs the broker, per M words, and where the broker spends it.

    python bench/experiments/broker_cpu.py --rounds 3 --words 4000000 --flink \
        --variant 'linger20={"PROCESSOR_KAFKA_CONFIG": "{\\"linger.ms\\": \\"20\\"}"}'
    python bench/experiments/broker_cpu.py --rounds 1 --jfr 10    # + Java Flight Recorder
    python bench/experiments/broker_cpu.py --pipeline wordcount --checkout before=/tmp/old

One broker for the whole sitting (the bench's throughput phase, `bench.harness.phases`, on a
backlog of ``--words`` of the bench's corpus): per round, the job as it is (``base``; of
``--pipeline``: ``emit="record"`` word count unless told), then each ``--variant`` (a name and
the JSON of more environment for the job's processes), then each ``--checkout`` (a name and
another checkout, whose engine runs with its ``.venv``: an A/B against an older commit), then
with ``--flink`` the bench's Flink DataStream peer (a record per word, as ``emit="record"``),
each on fresh topics (the last ones deleted), so that the broker's JIT is equally warm for
every side after the first round.
Prints per run the words/s, the job's and the broker's CPU s per M words, and the records
each topic got. ``--jfr SECONDS``: a Java Flight Recorder of the broker during the last run
(8 s after its start), summed by frame: the share of the broker's samples in each of its
hottest methods, the callers included. ``--batches``: per topic of each run, its data
batches, records and bytes a batch (Kafka's DumpLogSegments over the run's segments).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from bench.harness.measure import exact_counts  # noqa: E402
from bench.harness.phases import throughput  # noqa: E402
from bench.peers.base import Running  # noqa: E402
from bench.peers.flink_peer import FlinkPeer  # noqa: E402
from bench.peers.processor_peer import ProcessorPeer  # noqa: E402
from processor.commands import corpus  # noqa: E402
from processor.localkafka.broker import LocalBroker  # noqa: E402
from processor.localkafka.tools import run_tool  # noqa: E402

EMIT_RECORD = f"{ROOT}/bench/pipelines/wordcount_emit_record.py:pipeline"
FLINK = "flink"  # --flink: the bench's Flink DataStream peer (a record per word), each round


def _processor(pipeline: str, env: dict[str, str], checkout: Path | None = None) -> ProcessorPeer:
    if pipeline == "emit_record":
        return ProcessorPeer(checkout, pipeline=EMIT_RECORD, env=env)
    if pipeline == "no_combiner":
        return ProcessorPeer(checkout, env={"PROCESSOR_COMBINE": "false", **env})
    return ProcessorPeer(checkout, env=env)


def _records_and_clear(bootstrap: str) -> dict[str, int]:
    """Records per topic of the run (high watermarks), then the topics deleted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=10)
    topics = [t for t in metadata.topics if not t.startswith("__")]
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-cpu"})
    counts = {
        t: sum(
            reader.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
            for p in metadata.topics[t].partitions
        )
        for t in topics
    }
    reader.close()
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result()
    time.sleep(3)
    return counts


def _batches(log_dir: Path) -> dict[str, dict[str, float]]:
    """Per topic (not the internal ones): data batches, records and bytes per batch, from
    Kafka's DumpLogSegments over every segment of the run (``--batches``)."""
    per: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for segment in sorted(log_dir.glob("*-*/*.log")):
        topic, _, partition = segment.parent.name.rpartition("-")
        if topic.startswith("__") or not partition.isdigit():  # internal, or being deleted
            continue
        out = run_tool("org.apache.kafka.tools.DumpLogSegments", ["--files", str(segment)])
        for m in re.finditer(r"count: (\d+) .*?isControl: false .*?size: (\d+)", out):
            per[topic].append((int(m.group(1)), int(m.group(2))))
    return {
        t: {
            "batches": len(b),
            "records_per_batch": round(sum(c for c, _ in b) / len(b), 1),
            "bytes_per_batch": round(sum(s for _, s in b) / len(b)),
        }
        for t, b in per.items()
    }


def _jfr_summary(recording: Path, top: int) -> list[tuple[float, str]]:
    """The share of the recording's samples whose stack holds each method, highest first."""
    text = subprocess.run(
        ["jfr", "print", "--stack-depth", "64", "--events", "jdk.ExecutionSample", str(recording)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    samples = text.split("jdk.ExecutionSample {")[1:]
    holding: collections.Counter[str] = collections.Counter()
    for sample in samples:
        stack = re.search(r"stackTrace = \[(.*?)\n\s*\]", sample, re.S)
        lines = stack.group(1).strip().split("\n") if stack else []
        holding.update({re.sub(r"\(.*", "", line.strip()) for line in lines if line.strip()})
    return [(n / max(1, len(samples)), name) for name, n in holding.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument(
        "--pipeline", choices=("emit_record", "no_combiner", "wordcount"), default="emit_record"
    )
    parser.add_argument("--variant", action="append", default=[], help='NAME={"ENV": "value"}')
    parser.add_argument(
        "--checkout", action="append", default=[], help="NAME=PATH: the engine of a checkout"
    )
    parser.add_argument("--jfr", type=int, default=0, help="seconds of JFR in the last run")
    parser.add_argument("--port", type=int, default=27192)
    parser.add_argument("--flink", action="store_true", help="Flink DataStream's word count too")
    parser.add_argument("--batches", action="store_true", help="each topic's batch sizes")
    args = parser.parse_args()
    variants: dict[str, dict[str, str]] = {"base": {}}
    for given in args.variant:
        name, _, env = given.partition("=")
        variants[name] = json.loads(env)
    checkouts = {}
    for given in args.checkout:
        name, _, path = given.partition("=")
        if name in variants or name == FLINK:
            parser.error(f"--checkout {name}: the name of another run")
        checkouts[name] = Path(path).resolve()
        variants[name] = {}
    if args.flink:
        FlinkPeer().prepare()  # its jar, built once
        variants[FLINK] = {}
    text = list(corpus.lines(args.words, seed=1))
    expected = dict(exact_counts(text))
    lines = [line.encode() for line in text]
    del text
    tmp = Path(tempfile.mkdtemp(prefix="broker-cpu-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    recording = tmp / "broker.jfr"
    try:
        broker.start()
        pid = int(broker.pid_file.read_text().strip())
        runs = [(r, name) for r in range(args.rounds) for name in variants]
        for i, (r, name) in enumerate(runs):
            peer = (
                FlinkPeer()
                if name == FLINK
                else _processor(args.pipeline, variants[name], checkouts.get(name))
            )

            def record(running: Running, last: bool = i == len(runs) - 1) -> None:
                del running
                if args.jfr and last:
                    cmd = ["jcmd", str(pid), "JFR.start", f"duration={args.jfr}s"]
                    cmd += [f"filename={recording}", "settings=profile"]
                    timer = threading.Timer(8, subprocess.run, [cmd], {"capture_output": True})
                    timer.start()

            workdir, run_id = tmp / f"{name}{r}", f"{name}{r}"
            got = throughput(peer, broker, lines, expected, workdir, run_id, 600, on_start=record)
            row: dict[str, Any] = {
                "variant": name,
                "round": r,
                "ok": got.get("ok"),
                "words_per_s": got.get("words_per_s"),
                "job_cpu_s_per_m": got.get("cpu_s_per_million_words"),
                "broker_cpu_s_per_m": round(
                    got.get("broker_cpu_s_until_exact", 0.0) / (args.words / 1e6), 3
                ),
            }
            if args.batches:
                row["batches"] = _batches(tmp / "kafka" / "data")
            row["records"] = _records_and_clear(broker.bootstrap)
            print(json.dumps(row), flush=True)
        if args.jfr:
            time.sleep(args.jfr + 2)
            for share, method in _jfr_summary(recording, 40):
                print(f"{share:6.1%} {method}")
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
