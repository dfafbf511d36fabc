"""A user's per-record pipeline against the same work in plain confluent-kafka code (#44).

    python bench/user_pipeline.py [--events 1000000] [--runs 5] [--port 28092] \\
        [--engines processor,plain] [--results-dir bench/results]
    python bench/user_pipeline.py --engines processor,processor-partitioned,plain
    python bench/user_pipeline.py --engines processor --variant partitioned|shuffled|stateless

The pipeline is bench/pipelines/carts_avro.py: record metadata (the Kafka key, a header), a
keyed ``process`` with event-time timers, Avro out with keys and headers; every record on its
own, nothing to combine. ``plain`` is bench/peers/plain_carts_app.py: the same carts, timers
and outputs written by hand on confluent-kafka, exactly once (a transaction per second with
the outputs, a changelog of the changed carts and the consumer's positions), one process per
half of the input partitions, as this project runs two workers.

A sitting starts its own broker (``--port`` and the next port), writes ``--events`` events
(whole sessions, then a closing record per partition) into a topic of ``--partitions``
partitions, computes the expected output from the input alone, and then runs each engine
``--runs`` times over the same topic from the beginning, alternating which goes first. A run
is timed from its first consumed record to the commit of its last output (this project: the
completion of the checkpoint that committed it, bench/nexmark_done.py; plain: its last
transaction's commit); its output is read back read_committed and must equal the expected
multiset of (key, Avro value, headers) to count. CPU: the engine's process trees and the
broker's over the same window. Writes ``bench/results/user-pipeline-<time>.json``.

``--variant partitioned`` (or the engine ``processor-partitioned``, interleaved with the
others) runs the same pipeline over ``keyed_source`` (no shuffle: the input is partitioned by
user, murmur2, as a Java producer places it), the plain app's layout. The other variants run
a part of it (this project only), to see what each part costs: ``shuffled`` sends every add
through the same ``key_by`` and writes it as it is (no state, no timers), ``stateless``
writes it at the source (no shuffle either); checked exact the same way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.harness.measure import create_topic
from bench.nexmark_cpu import CpuSampler, load_1m, machine, watch_exit
from bench.nexmark_done import processor_done_at
from bench.peers.base import Job, Running, spawn
from bench.peers.processor_peer import ProcessorPeer
from bench.pipelines import carts_avro
from processor.localkafka.broker import LocalBroker

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TOPIC = "carts"
INTERVAL_MS = 1000
# processor-partitioned: this project running --variant partitioned, interleaved with the
# others in one sitting.
ENGINES = ("processor", "processor-partitioned", "plain")
PLAIN_PROCESSES = 2


def load_input(bootstrap: str, partitions: list[list[carts_avro.Record]]) -> None:
    """The input, in each partition's order."""
    create_topic(bootstrap, TOPIC, len(partitions))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True}
    )
    for records in partitions:
        for part, key, value, source, _ts in records:
            heads: list[tuple[str, str | bytes | None]] | None = (
                [("source", source)] if source else None
            )
            while True:
                try:
                    producer.produce(TOPIC, value, key, part, headers=heads)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(120) == 0, "input records unsent"


def run_processor(job: Job, timeout: float, variant: str) -> dict[str, Any]:
    file = job.workdir / "pipeline.py"
    job.workdir.mkdir(parents=True, exist_ok=True)
    file.write_text(
        "import runpy\n\n"
        f"pipeline = runpy.run_path({str(ROOT / 'bench/pipelines/carts_avro.py')!r})['build']"
        f"(events={job.input_topic!r}, output={job.output_topic!r}, variant={variant!r})\n"
    )
    peer = ProcessorPeer(pipeline=str(file))
    running = peer.start(job)
    timing = _wait(running, timeout)
    first = peer.first_consumed_at(running)
    done = processor_done_at(job.bootstrap, job.name, job.output_topic)
    return timing(first, done)


def run_plain(job: Job, timeout: float, partitions: int) -> dict[str, Any]:
    changelog = f"{job.name}-changelog"
    admin = AdminClient({"bootstrap.servers": job.bootstrap})
    topic = NewTopic(changelog, partitions, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])[changelog].result(30)
    app = ROOT / "bench" / "peers" / "plain_carts_app.py"
    procs, logs = [], []
    for i in range(PLAIN_PROCESSES):
        share = ",".join(str(p) for p in range(partitions) if p % PLAIN_PROCESSES == i)
        log = job.workdir / f"plain-{i}.log"
        cmd = [
            sys.executable,
            str(app),
            job.bootstrap,
            job.input_topic,
            share,
            job.output_topic,
            changelog,
            f"{job.name}-{i}",
            str(job.interval_ms),
        ]
        procs.append(spawn(cmd, log, cwd=ROOT))
        logs.append(log)
    running = Running(procs, logs)
    timing = _wait(running, timeout)
    text = running.log_text()
    firsts = [int(x.split()[1]) / 1000 for x in text.splitlines() if x.startswith("FIRST_RECORD")]
    dones = [int(x.split()[1]) / 1000 for x in text.splitlines() if x.startswith("DONE")]
    done = max(dones) if len(dones) == PLAIN_PROCESSES else None
    return timing(min(firsts) if firsts else None, done)


Timing = Callable[[float | None, float | None], dict[str, Any]]


def _wait(running: Running, timeout: float) -> Timing:
    """Waits for the job's exit; returns what times it once its first and done are known."""
    watched = watch_exit(running, timeout)
    finished, tree, ended = watched.finished, watched.tree, watched.ended
    codes = running.exit_codes()

    def timing(first: float | None, done: float | None) -> dict[str, Any]:
        if not finished or first is None or done is None:
            return {"state": "TIMEOUT" if not finished else "NO START OR END", "seconds": None}
        return {
            "state": "FINISHED" if set(codes) == {0} else f"EXIT {codes}",
            "first": first,
            "done": done,
            "seconds": round(done - first, 3),
            "seconds_to_exit": round(ended - first, 3),
            "job_cpu_s": round(tree.cpu_at(done) - tree.cpu_at(first), 3),
            "job_cpu_s_with_startup_and_exit": round(watched.total_cpu_s, 3),
        }

    return timing


def one(
    args: argparse.Namespace,
    bootstrap: str,
    broker_pid: int,
    run: int,
    engine: str,
    tmp: Path,
    want: Any,
    events: int,
) -> dict[str, Any]:
    variant = "partitioned" if engine == "processor-partitioned" else args.variant
    output = f"{TOPIC}-out-{engine}-r{run}"
    create_topic(bootstrap, output, args.partitions)
    name = f"carts-{engine}-r{run}-{tmp.name[-6:]}"
    job = Job(bootstrap, name, TOPIC, output, tmp / name, INTERVAL_MS, 2, until_idle=True)
    job.workdir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"run": run, "engine": engine, "load_1m": load_1m()}
    broker = CpuSampler([broker_pid])
    broker.start()
    try:
        if engine.startswith("processor"):
            record |= run_processor(job, args.timeout, variant)
        else:
            record |= run_plain(job, args.timeout, args.partitions)
    finally:
        broker.stop()
    record["exact"] = False
    if record["seconds"]:
        record["events_per_s"] = round(events / record["seconds"])
        record["broker_cpu_s"] = broker.cpu_between(record["first"], record["done"])
        record["job_cpu_s_per_m_events"] = round(record["job_cpu_s"] * 1e6 / events, 2)
        record["broker_cpu_s_per_m_events"] = round(record["broker_cpu_s"] * 1e6 / events, 2)
        from tests.integration.pipeline_run import read_committed

        parts = read_committed(bootstrap, output, timeout=120)
        got = carts_avro.rows_of(r for records in parts.values() for r in records)
        record["output_records"] = sum(got.values())
        # An exact output counts only from a run that also ended well.
        record["exact"] = got == want and record["state"] == "FINISHED"
        if not record["exact"]:
            record["missing"] = sum((want - got).values())
            record["extra"] = sum((got - want).values())
    if record["exact"] and not args.keep:
        shutil.rmtree(job.workdir, ignore_errors=True)
    print(
        f"run {run} {engine}: {record['state']}, {record.get('events_per_s')} events/s, "
        f"job CPU {record.get('job_cpu_s')} s, exact={record['exact']}",
        flush=True,
    )
    return record


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per engine: medians and ranges of the exact runs; the ratio of the medians."""
    out: dict[str, Any] = {}
    for engine in ENGINES:
        good = [r for r in runs if r["engine"] == engine and r["exact"]]
        if not good:
            continue
        row: dict[str, Any] = {"exact_runs": len(good)}
        for key in ("events_per_s", "job_cpu_s_per_m_events", "broker_cpu_s_per_m_events"):
            values = sorted(r[key] for r in good)
            row[key] = {"median": statistics.median(values), "min": values[0], "max": values[-1]}
        out[engine] = row
    for engine, suffix in (("processor", ""), ("processor-partitioned", "_partitioned")):
        if engine in out and "plain" in out:
            p, q = out[engine]["events_per_s"], out["plain"]["events_per_s"]
            out[f"ratio{suffix}"] = round(p["median"] / q["median"], 2)
            out[f"ranges_overlap{suffix}"] = p["min"] <= q["max"] and q["min"] <= p["max"]
    return out


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| engine | events/s, median (range) | job CPU s / M events | broker CPU s / M events "
        "| exact runs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for engine in ENGINES:
        row = summary.get(engine)
        if row is None:
            continue
        rate, job, broker = (
            row[k] for k in ("events_per_s", "job_cpu_s_per_m_events", "broker_cpu_s_per_m_events")
        )
        lines.append(
            f"| {engine} | {rate['median']:,.0f} ({rate['min']:,}-{rate['max']:,}) "
            f"| {job['median']:.2f} ({job['min']:.2f}-{job['max']:.2f}) "
            f"| {broker['median']:.2f} ({broker['min']:.2f}-{broker['max']:.2f}) "
            f"| {row['exact_runs']} |"
        )
    for engine, suffix in (("processor", ""), ("processor-partitioned", "_partitioned")):
        if f"ratio{suffix}" in summary:
            lines.append(
                f"\n{engine} / plain: {summary[f'ratio{suffix}']}x (ranges overlap: "
                f"{summary[f'ranges_overlap{suffix}']})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--port", type=int, default=28092)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--timeout", type=float, default=1800, help="per run, seconds")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--variant",
        choices=carts_avro.VARIANTS,
        default="full",
        help="the pipeline's parts (bench/pipelines/carts_avro.py); plain: full or partitioned",
    )
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if args.variant not in carts_avro.WHOLE and {"plain", "processor-partitioned"} & set(engines):
        # (both do the whole pipeline: the same output as the full variant's)
        parser.error("a variant that does a part of the pipeline: --engines processor only")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    tmp = Path(tempfile.mkdtemp(prefix="bench-user-"))
    out = args.results_dir / f"user-pipeline-{stamp}.json"
    partitions = carts_avro.generate(args.events, args.partitions)
    want = carts_avro.expected(partitions, args.variant)
    report: dict[str, Any] = {
        "timestamp": stamp,
        "machine": machine(),
        "method": __doc__,
        "events": sum(len(p) for p in partitions),
        "expected_output_records": sum(want.values()),
        "partitions": args.partitions,
        "engines": engines,
        "variant": args.variant,
        "runs": [],
    }
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    try:
        broker.start()
        pid = broker.running_pid()
        if pid is None:
            raise RuntimeError("the broker does not run")
        load_input(broker.bootstrap, partitions)
        del partitions
        for run in range(1, args.runs + 1):
            for engine in engines if run % 2 else engines[::-1]:
                try:
                    record = one(
                        args, broker.bootstrap, pid, run, engine, tmp, want, report["events"]
                    )
                except (RuntimeError, OSError, subprocess.SubprocessError, AssertionError) as exc:
                    record = {
                        "run": run,
                        "engine": engine,
                        "state": f"ERROR: {exc}",
                        "exact": False,
                    }
                report["runs"].append(record)
                report["summary"] = summarize(report["runs"])
                args.results_dir.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(markdown(report.get("summary", {})))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
