"""Nexmark backlog throughput (issue #42): per query and engine, the events/s at which the
engine drains a preloaded backlog of the ``nexmark`` crate's events, every run's output
checked against the query's definition, repeated runs interleaved, CPU per event.

    python bench/nexmark.py [--queries q0,q5] [--engines processor,flink] [--events 10000000]
        [--runs 5] [--port 26092] [--partitions 4] [--results-dir bench/results]
    python bench/nexmark.py --table bench/results/nexmark-<stamp>.json
    python bench/nexmark.py --phase live ...   # live capacity and latency: bench/nexmark_live.py

A sitting starts its own broker (``--port`` and the next port), then:

1. Events: ``--events`` events of the crate (0.2.0, ``nexmark --no-wait``) loaded into the
   topic ``nexmark`` as `processor nexmark generate --closing` loads them
   (bench/nexmark_load.py): blocks of the binary's output round robin over the partitions,
   each partition in event-time order, then one closing event per partition 60 s of event
   time after the last, so both engines close every window and timer (Flink's bounded source
   ends with a final watermark as well; the input is the same for both). The JSON says what
   the generator alone and the load cost, in events/s.
2. Expected output: the topic read back once and every selected query's definition
   (tests/nexmark_data.py) computed over it in one pass in bounded memory
   (bench/nexmark_expect.py; the JSON says its time and the harness's peak RSS).
3. Runs: for run in 1..``--runs``, for query, for engine, the engine that goes first
   alternating from one query (and run) to the next, so one sitting interleaves the engines:
   - processor: ``processor local --workers 2 --until-idle`` (bench/peers/processor_peer.py) on
     examples/nexmark/<query>.py built on this run's topics; the time is from the first
     consume (the worker's log) to the completion of the checkpoint that committed the last
     output record and the last input (bench/nexmark_done.py; the exit, some idle checkpoints
     later, is kept as ``seconds_to_exit``); its CPU to the exit, the whole ``processor
     local`` tree's utime + stime (/proc, sampled; reaped children included);
   - flink: the query's Flink SQL (bench/peers/flink_nexmark_peer.py) with a bounded source,
     submitted to a session cluster of two one-slot TaskManagers started once per sitting
     (bench/peers/flink_cluster.py); the time is the job's own duration (REST
     ``/jobs/<id>``: start to FINISHED, the final checkpoint included); its CPU, the
     JobManager's and the TaskManagers' over that window (the submitting client's, which
     plans the SQL, apart as ``client_cpu_s``);
   - both: the broker's CPU over the same window; the run's output read back read_committed,
     its records counted (per M events) and compared with the expected output. A run counts
     only when ``exact``. The output topic and the job's own topics are deleted after it.
4. Per (query, engine): the runs, the median of events/s with its range, CPU s per M events
   of the job and of the broker, output records per M events (bench/nexmark_table.py), a
   summary printed and the JSON written after every run (bench/results/nexmark-<stamp>.json),
   with the machine and each run's 1-minute load average at its start: figures of different
   sittings or machines are never joined.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.common import children_cpu_s
from bench.harness.measure import create_topic
from bench.nexmark_cpu import CpuSampler, load_1m, machine, watch_exit
from bench.nexmark_done import processor_done_at
from bench.nexmark_expect import from_topic
from bench.nexmark_jobs import SUBMIT_TIMEOUT_S, cancel_jobs, delete_topics, pipeline_file
from bench.nexmark_live import LiveSitting
from bench.nexmark_load import load_crate
from bench.nexmark_output import Rows, compare_rows, got_rows
from bench.nexmark_table import live_markdown, markdown, summarize
from bench.peers.base import Job
from bench.peers.flink_cluster import FlinkSessionCluster, stop_all
from bench.peers.flink_nexmark_peer import QUERIES, FlinkNexmarkPeer
from bench.peers.processor_peer import ProcessorPeer
from processor.localkafka.broker import LocalBroker

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ENGINES = ("processor", "flink")
TOPIC = "nexmark"


def run_processor(job: Job, query: str, timeout: float, broker: CpuSampler) -> dict[str, Any]:
    job.workdir.mkdir(parents=True, exist_ok=True)
    file = pipeline_file(query, job.input_topic, job.output_topic, job.workdir / "pipeline.py")
    peer = ProcessorPeer(pipeline=str(file))
    running = peer.start(job)
    watched = watch_exit(running, timeout)
    finished, ended, tree = watched.finished, watched.ended, watched.tree
    total, reaped = watched.total_cpu_s, watched.reaped_cpu_s
    first = peer.first_consumed_at(running)
    if not finished or first is None:
        return {"state": "TIMEOUT" if not finished else "NO START", "seconds": None}
    codes = running.exit_codes()
    done = processor_done_at(job.bootstrap, job.name, job.output_topic)
    return {
        "state": "FINISHED" if codes == [0] else f"EXIT {codes}",
        # To the checkpoint that committed the last output and input (bench/nexmark_done.py),
        # not to the exit after the idle checkpoints; both kept.
        "seconds": round((done if done is not None else ended) - first, 3),
        "seconds_to_exit": round(ended - first, 3),
        "seconds_from": "output committed" if done is not None else "exit",
        "job_cpu_s": round(total - tree.cpu_at(first), 3),
        "job_cpu_s_with_startup": round(total, 3),
        "job_cpu_s_with_startup_reaped": round(reaped, 3),
        "job_cpu_s_with_startup_sampled": round(tree.cpu_at(ended), 3),
        "broker_cpu_s": broker.cpu_between(first, ended),
    }


def run_flink(
    cluster: FlinkSessionCluster,
    procs: list[subprocess.Popen[bytes]],
    job: Job,
    query: str,
    timeout: float,
    broker: CpuSampler,
) -> dict[str, Any]:
    peer = FlinkNexmarkPeer(query)
    jvms = CpuSampler([p.pid for p in procs])
    jvms.start()
    try:
        reaped = children_cpu_s()
        job_id = peer.submit(cluster, job, timeout=SUBMIT_TIMEOUT_S)
        client = children_cpu_s() - reaped
        state = cluster.wait_final(job_id, timeout)
        time.sleep(2 * jvms.interval)  # a sample after the end
    except BaseException:
        cancel_jobs(cluster)
        raise
    finally:
        jvms.stop()
    if state != "FINISHED":
        cancel_jobs(cluster)
    detail = cluster.rest(f"/jobs/{job_id}")
    if state != "FINISHED":
        return {"state": state, "seconds": None, "job_id": job_id}
    start, end = detail["start-time"] / 1000, detail["end-time"] / 1000
    return {
        "state": state,
        "seconds": detail["duration"] / 1000,
        "job_id": job_id,
        "job_cpu_s": jvms.cpu_between(start, end),
        "client_cpu_s": round(client, 3),
        "broker_cpu_s": broker.cpu_between(start, end),
    }


class Sitting:
    """One broker, one load, one Flink session cluster; every run of every query and engine."""

    def __init__(self, args: argparse.Namespace, queries: list[str], engines: list[str]) -> None:
        self.args = args
        self.queries = queries
        self.engines = engines
        self.stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-nexmark-"))
        self.out = args.results_dir / f"nexmark-{self.stamp}.json"
        self.report: dict[str, Any] = {
            "timestamp": self.stamp,
            "machine": machine(),
            "load_1m_at_start": load_1m(),
            "events": args.events,
            "partitions": args.partitions,
            "runs_requested": args.runs,
            "queries": queries,
            "engines": engines,
            "method": __doc__,
            "runs": [],
        }
        self.wants: dict[str, Rows] = {}

    def write(self) -> None:
        self.report |= summarize(self.report)
        self.args.results_dir.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.report, indent=2) + "\n")

    def prepare(self, bootstrap: str) -> None:
        args = self.args
        if "flink" in self.engines:
            FlinkNexmarkPeer(self.queries[0]).prepare()
        print(f"loading {args.events:,} events of the crate into {TOPIC}", flush=True)
        self.report["loader"] = load_crate(bootstrap, TOPIC, args.events, args.partitions)
        print(json.dumps(self.report["loader"]), flush=True)
        started, rss = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        expected = from_topic(bootstrap, TOPIC, self.queries)
        self.wants = {q: expected.rows(q) for q in self.queries}
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.report["expected"] = {
            "how": "the topic read back read_committed once, every query's definition in "
            "one pass (bench/nexmark_expect.py), rows as a count and a digest "
            "(bench/nexmark_output.py)",
            "events": expected.events,
            "seconds": round(seconds, 1),
            "events_per_s": round(expected.events / seconds),
            "harness_peak_rss_mb": round(peak / 1024),
            "harness_peak_rss_mb_before": round(rss / 1024),
            "rows": {q: w.count for q, w in self.wants.items()},
        }
        print(json.dumps(self.report["expected"]), flush=True)
        self.report["settings"] = {
            "processor": ProcessorPeer(pipeline="examples/nexmark/<query>.py").settings(),
            "flink": {q: FlinkNexmarkPeer(q).settings() for q in self.queries},
        }

    def run_all(self, bootstrap: str, broker_pid: int) -> None:
        cluster, procs = None, []
        if "flink" in self.engines:
            cluster = FlinkSessionCluster(self.tmp / "cluster", taskmanagers=2)
            procs = cluster.start_all()
        try:
            turn = 0
            for run in range(1, self.args.runs + 1):
                for query in self.queries:
                    order = self.engines if turn % 2 == 0 else self.engines[::-1]
                    turn += 1
                    for engine in order:
                        record = self.one(bootstrap, broker_pid, run, query, engine, cluster, procs)
                        record["first"] = order[0]
                        self.report["runs"].append(record)
                        self.write()
        finally:
            stop_all(procs)

    def one(
        self,
        bootstrap: str,
        broker_pid: int,
        run: int,
        query: str,
        engine: str,
        cluster: FlinkSessionCluster | None,
        procs: list[subprocess.Popen[bytes]],
    ) -> dict[str, Any]:
        output = f"{TOPIC}-{query}-{engine}-r{run}"
        create_topic(bootstrap, output, self.args.partitions)
        job = Job(
            bootstrap=bootstrap,
            name=f"nexmark-{query}-{engine}-r{run}-{self.stamp}",
            input_topic=TOPIC,
            output_topic=output,
            workdir=self.tmp / f"{query}-{engine}-r{run}",
            until_idle=True,
        )
        record: dict[str, Any] = {"run": run, "query": query, "engine": engine}
        record["load_1m"] = load_1m()
        broker = CpuSampler([broker_pid])
        broker.start()
        try:
            if engine == "flink" and cluster is not None:
                record |= run_flink(cluster, procs, job, query, self.args.timeout, broker)
            else:
                record |= run_processor(job, query, self.args.timeout, broker)
        except (RuntimeError, OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
            # The sitting goes on: the run does not count.
            record |= {"state": f"ERROR: {exc}", "seconds": None}
        finally:
            broker.stop()
        events = self.report["loader"]["records"]
        seconds = record["seconds"]
        record["events_per_s"] = round(events / seconds) if seconds else None
        record["exact"] = False
        if record["state"] == "FINISHED":
            try:
                have, records = got_rows(query, bootstrap, output)
                record |= compare_rows(self.wants[query], have)
            except (TimeoutError, RuntimeError, ValueError) as exc:
                record["state"] = f"OUTPUT NOT READ: {exc}"
            else:
                per_m = events / 1e6
                record["output_records"] = records
                record["output_records_per_m_events"] = round(records / per_m, 1)
                record["job_cpu_s_per_m_events"] = round(record["job_cpu_s"] / per_m, 2)
                record["broker_cpu_s_per_m_events"] = round(record["broker_cpu_s"] / per_m, 2)
        if not self.args.keep:
            delete_topics(bootstrap, output, job.name)
            shutil.rmtree(job.workdir, ignore_errors=True)
        print(
            f"run {run} {query} {engine}: {record['state']}, {record['events_per_s']} events/s, "
            f"job CPU {record.get('job_cpu_s')} s, exact={record['exact']}",
            flush=True,
        )
        return record

    def main(self) -> None:
        broker = LocalBroker(
            port=self.args.port, controller_port=self.args.port + 1, data_dir=self.tmp / "kafka"
        )
        try:
            broker.start()
            pid = broker.running_pid()
            if pid is None:
                raise RuntimeError("the broker does not run")
            self.prepare(broker.bootstrap)
            self.write()
            self.run_all(broker.bootstrap, pid)
        finally:
            broker.stop()
            if not self.args.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)
        self.write()
        print(markdown(self.report))
        print(f"wrote {self.out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--port", type=int, default=26092)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600, help="per run, seconds")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the work directory, topics")
    parser.add_argument("--table", type=Path, help="only print a results file's markdown table")
    live = parser.add_argument_group("--phase live (bench/nexmark_live.py)")
    parser.add_argument(
        "--phase",
        choices=("backlog", "live"),
        default="backlog",
        help="backlog (default): a preloaded backlog; live: capacity and latency, replayed",
    )
    live.add_argument("--latency-runs", type=int, default=3, help="per engine and query")
    live.add_argument(
        "--backlog", type=Path, help="a backlog results file: each ladder starts at half its median"
    )
    live.add_argument("--start", type=int, default=20_000, help="events/s, without --backlog")
    live.add_argument("--quick", action="store_true", help="short steps: a smoke run")
    live.add_argument(
        "--events-file", type=Path, help="replay this file of the crate's lines, not a new one"
    )
    args = parser.parse_args(argv)
    if args.table:
        report = json.loads(args.table.read_text())
        print(live_markdown(report) if report.get("phase") == "live" else markdown(report))
        return 0
    queries = [q for q in args.queries.split(",") if q]
    engines = [e for e in args.engines.split(",") if e]
    if set(queries) - set(QUERIES) or set(engines) - set(ENGINES) or not queries or not engines:
        parser.error("unknown query or engine")
    if args.runs < 1 or args.events < 1 or args.latency_runs < 0:
        parser.error("--runs and --events at least 1, --latency-runs 0 or more")
    if args.phase == "live":
        live_sitting = LiveSitting(args, queries, engines)
        live_sitting.main()
        runs = live_sitting.report["runs"]
    else:
        sitting = Sitting(args, queries, engines)
        sitting.main()
        runs = sitting.report["runs"]
    return 0 if runs and all(r["exact"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
