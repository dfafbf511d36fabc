"""Nexmark live (issue #42): per query and engine, the balanced live capacity (the highest
rate of a live stream of the crate's events at which every stage keeps up) and p50/p99
latency at half of the lower engine's capacity, each run's output checked exact.

    python bench/nexmark.py --phase live [--queries q1,q5] [--engines processor,flink]
        [--events 20000000] [--runs 5] [--latency-runs 3] [--backlog nexmark-<stamp>.json]
        [--start 20000] [--port 26092] [--partitions 4] [--quick] [--events-file FILE]

A sitting starts its own broker (``--port`` and the next port) and, for Flink, one session
cluster of two one-slot TaskManagers (bench/peers/flink_cluster.py), then:

1. Events: ``nexmark --no-wait --number <--events>`` into a file, once. Every run replays it
   from its first line into a new topic (bench/nexmark_replay.py: a JVM, kafka-clients, the
   load generator's jar; blocks of 256 lines round robin over the partitions, each partition
   in event-time order), at a rate the bench sets, and ends with one closing event per
   partition 60 s of event time after the last event sent. A run that reaches the file's end
   says so (``file_exhausted``): a larger ``--events`` gives the ladder room.
   ``--events-file`` replays a file generated before (``nexmark --no-wait --number N``)
   instead.
2. Capacity, for run in 1..``--runs``, for query, for engine (the engine going first
   alternating): the job is started on its topics and, once it consumes, the ladder of the
   word count's capacity phase (bench/harness/capacity.py) runs on it: from the start rate
   (half of the engine's backlog median in ``--backlog``, else ``--start``) up 1.2x a step;
   a step holds its rate ``settle_s`` then ``window_s``, and is kept up when the group's lag
   on the input and on every internal topic (seconds of its input; bench/harness/lag.py) grew
   at most 0.03 s per s with a median of at most 5 s, the replayer having sent at least 95 %
   of the rate. The first step not kept up is tried again after the lag drains; then
   bisections to 10 %. The capacity is the highest step kept up.
3. Latency, per query at half of the lower engine's median capacity (the same rate for
   both), ``--latency-runs`` runs per engine, interleaved: the job started, the rate held for
   a warm-up and a measured window, each output row's latency as bench/nexmark_latency.py
   defines it (visible to a read_committed reader minus the acknowledgement of the input event
   it depends on), p50/p99 of each run, medians over the runs.
4. Exact, every run: the replayer stops, the closing events go out, the job drains (input
   lag 0, internal topics settled, the output unchanged for a few seconds), stops, and the
   output is read back read_committed and compared with the definitions over the events sent
   (the file's first lines, as many as were sent, and the closing events:
   bench/nexmark_expect.py). A run only counts if exact.

The JSON (bench/results/nexmark-live-<stamp>.json, written after every run) has the machine,
every run with its steps, and per query and engine the summaries; bench/nexmark_table.py
prints its table.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from bench.harness.capacity import (
    DRAINED_LAG_S,
    MIN_ACHIEVED,
    MIN_RATE,
    CapacityMode,
    down,
    next_bisection,
    next_rates,
)
from bench.harness.common import say
from bench.harness.lag import LagProbe, judge
from bench.harness.measure import create_topic
from bench.nexmark_cpu import CpuSampler, load_1m, machine
from bench.nexmark_expect import Expected
from bench.nexmark_jobs import SUBMIT_TIMEOUT_S, cancel_jobs, delete_topics, pipeline_file
from bench.nexmark_latency import (
    DEFINITION,
    MEASURED,
    NOT_MEASURED,
    Dependencies,
    OutputTimes,
    latencies,
)
from bench.nexmark_output import compare_rows, got_rows
from bench.nexmark_replay import (
    BLOCK,
    AckLog,
    Replayer,
    check_placement,
    generate_file,
    lines,
)
from bench.nexmark_replay import prepare as prepare_replayer
from bench.nexmark_table import live_markdown, summarize_live
from bench.peers.base import Job
from bench.peers.flink_cluster import FlinkSessionCluster, stop_all
from bench.peers.flink_nexmark_peer import DEFAULT_RATE, FlinkNexmarkPeer
from bench.peers.processor_peer import ProcessorPeer
from processor.commands import nexmark as generate
from processor.localkafka.broker import LocalBroker

READY_TIMEOUT_S = 300  # from the start to consuming (Flink plans the SQL first)
SETTLED_S = 5.0  # the output's end unchanged this long after the input drained: done
FINISH_TIMEOUT_S = 180
OUTPUT_READS = 3  # the output read back at most this many times while it differs


@dataclass(frozen=True)
class LiveMode:
    capacity: CapacityMode
    latency_warmup_s: float = 15.0
    latency_s: float = 60.0


FULL = LiveMode(capacity=CapacityMode(start=0))
# The smoke run: two short steps, a short latency window; only to show the phases work.
QUICK = LiveMode(
    capacity=CapacityMode(
        start=0, factor=2.0, bisections=0, warmup_s=3.0, settle_s=2.0, window_s=8.0, max_steps=2
    ),
    latency_warmup_s=3.0,
    latency_s=20.0,
)


class Engine(Protocol):
    """One engine's job for one live run."""

    def start(self) -> None: ...
    def ready(self) -> bool: ...
    def alive(self) -> bool: ...
    def roots(self) -> list[int]: ...
    def stop(self) -> None: ...


class ProcessorLive:
    """``processor local --workers 2`` on examples/nexmark/<query>.py, until stopped."""

    def __init__(self, job: Job, query: str) -> None:
        job.workdir.mkdir(parents=True, exist_ok=True)
        path = pipeline_file(query, job.input_topic, job.output_topic, job.workdir / "pipe.py")
        self.job = job
        self.peer = ProcessorPeer(pipeline=str(path))
        self.running: Any = None

    def start(self) -> None:
        self.running = self.peer.start(self.job)

    def ready(self) -> bool:
        return self.peer.first_consumed_at(self.running) is not None

    def alive(self) -> bool:
        return bool(self.running.alive())

    def roots(self) -> list[int]:
        return list(self.running.roots)

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()


class FlinkLive:
    """The query's Flink SQL, an unbounded source, submitted to the session cluster."""

    def __init__(
        self,
        cluster: FlinkSessionCluster,
        procs: list[subprocess.Popen[bytes]],
        job: Job,
        query: str,
    ) -> None:
        self.cluster, self.procs, self.job = cluster, procs, job
        self.peer = FlinkNexmarkPeer(query, DEFAULT_RATE)
        self.job_id: str | None = None

    def start(self) -> None:
        self.job_id = self.peer.submit(self.cluster, self.job, timeout=SUBMIT_TIMEOUT_S)

    def ready(self) -> bool:
        return self.job_id is not None and self.cluster.tasks_running(self.job_id) is True

    def alive(self) -> bool:
        assert self.job_id is not None
        return self.cluster.job_state(self.job_id) not in ("FAILED", "CANCELED", "FINISHED")

    def roots(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        cancel_jobs(self.cluster)
        if self.job_id is not None:
            self.cluster.wait_final(self.job_id, 60)


def wait(predicate: Callable[[], bool], timeout: float, alive: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if not alive():
            raise RuntimeError("the job exited")
        time.sleep(0.5)
    return False


class Run:
    """One live run of one query on one engine: topics, the job, the replayer, the lag probe;
    the phase's body (`ladder` or `steady`), then the drain and the exact check."""

    def __init__(self, sitting: LiveSitting, kind: str, query: str, engine: str, k: int) -> None:
        self.sitting, self.query = sitting, query
        bootstrap, partitions = sitting.bootstrap, sitting.args.partitions
        tag = f"{query}-{engine}-{kind}{k}"
        self.job = Job(
            bootstrap=bootstrap,
            name=f"nxlive-{tag}-{sitting.stamp}",
            input_topic=f"nxlive-{tag}",
            output_topic=f"nxlive-{tag}-out",
            workdir=sitting.tmp / tag,
        )
        self.engine: Engine = (
            FlinkLive(sitting.cluster, sitting.procs, self.job, query)
            if engine == "flink" and sitting.cluster is not None
            else ProcessorLive(self.job, query)
        )
        self.replay = Replayer(
            bootstrap, self.job.input_topic, partitions, sitting.events_file, self.job.workdir
        )
        self.probe = LagProbe(
            bootstrap, self.job.name, self.job.input_topic, self.job.output_topic, partitions
        )
        self.record: dict[str, Any] = {"kind": kind, "run": k, "query": query, "engine": engine}
        self.cpu: CpuSampler | None = None
        self.broker_cpu = CpuSampler([sitting.broker_pid])

    def execute(self, body: Callable[[Run], None], watch: bool) -> dict[str, Any]:
        args = self.sitting.args
        create_topic(self.job.bootstrap, self.job.input_topic, args.partitions)
        create_topic(self.job.bootstrap, self.job.output_topic, args.partitions)
        watcher = None
        if watch:
            watcher = OutputTimes(
                self.job.bootstrap, self.job.output_topic, args.partitions, self.query
            )
            watcher.start()
        self.record["load_1m"] = load_1m()
        deps: Dependencies | None = None
        expected: Expected | None = None
        acks: AckLog | None = None
        try:
            self.probe.start()  # offsets only: before the job, it finds none committed
            self.engine.start()
            if not wait(self.engine.ready, READY_TIMEOUT_S, self.engine.alive):
                raise TimeoutError(f"the job did not consume within {READY_TIMEOUT_S} s")
            self.cpu = CpuSampler(self.engine.roots())
            self.cpu.start()
            self.broker_cpu.start()
            self.replay.start()
            body(self)
            sent = self.replay.stop()
            self.record["events_sent"] = sent
            self.record["file_exhausted"] = self.replay.exhausted_at is not None
            expected, deps, tails = self.sitting.expected(self.query, sent, watch)
            closing = generate.closing_event(deps.last_ms + generate.CLOSING_MS)
            acks = self.replay.close(closing)
            check_placement(self.job.bootstrap, self.job.input_topic, tails)
            self.record["finish"] = self.finish()
            self.check_output(expected)
        except (RuntimeError, TimeoutError, OSError, KeyError, ValueError) as exc:
            traceback.print_exc()
            self.record["error"] = str(exc)
        finally:
            self.engine.stop()
            self.replay.kill()
            if self.probe.is_alive():
                self.probe.stop()
            if watcher is not None:
                watcher.stop()
            for sampler in (self.cpu, self.broker_cpu):
                if sampler is not None and sampler.is_alive():
                    sampler.stop()
        self.record.setdefault("exact", False)
        if watcher is not None and deps is not None and acks is not None:
            window = self.record.get("measured_window")
            if window:
                self.record["latency"] = latencies(watcher.kept, deps, acks, *window)
            self.record["reader_records"] = watcher.records
        if not args.keep:
            delete_topics(self.job.bootstrap, self.job.output_topic, self.job.name)
            delete_topics(self.job.bootstrap, self.job.input_topic, self.job.name)
            shutil.rmtree(self.job.workdir, ignore_errors=True)
        return self.record

    def finish(self) -> dict[str, Any]:
        """Until the input is drained and the output has not moved for `SETTLED_S`."""
        started = time.time()

        def settled() -> bool:
            if not self.probe.drained():
                return False
            recent = [s for s in self.probe.samples if s.at >= time.time() - SETTLED_S - 1]
            if len(recent) < SETTLED_S:
                return False
            return len({s.output_end for s in recent}) == 1

        if not wait(settled, FINISH_TIMEOUT_S, self.engine.alive):
            raise TimeoutError(f"not drained and settled within {FINISH_TIMEOUT_S} s")
        return {"drained_after_s": round(time.time() - started, 1)}

    def check_output(self, expected: Expected) -> None:
        """The committed output against the definitions, read while the job still runs: read
        again after `SETTLED_S` while it differs (an output that came late), at most
        ``OUTPUT_READS`` times."""
        want = expected.rows(self.query)
        for attempt in range(1, OUTPUT_READS + 1):
            have, records = got_rows(self.query, self.job.bootstrap, self.job.output_topic)
            self.record |= compare_rows(want, have) | {"output_records": records}
            self.record["output_reads"] = attempt
            if self.record["exact"] or not self.engine.alive():
                return
            time.sleep(SETTLED_S)

    # -- the phases' bodies -----------------------------------------------------------------

    def step(self, rate: int, mode: CapacityMode) -> dict[str, Any]:
        """One step of the ladder: ``rate`` held, then judged over its window."""
        self.replay.set_rate(rate)
        time.sleep(mode.settle_s)
        start = time.time()
        time.sleep(mode.window_s)
        end = time.time()
        if not self.engine.alive():
            raise RuntimeError("the job exited during the run")
        inside = [s for s in self.probe.samples if start <= s.at <= end]
        verdict = judge(inside, rate, 1.0)
        achieved = self.replay.acked_per_s(start, end) or 0.0
        verdict |= {
            "rate": rate,
            "window": [round(start, 3), round(end, 3)],
            "achieved_events_per_s": round(achieved),
            "replayer_max_behind_ms": self.replay.max_behind_ms(start, end),
        }
        if self.replay.exhausted_at is not None:
            verdict |= {"kept_up": False, "file_exhausted": True, "why": "the file ran out"}
        elif achieved < MIN_ACHIEVED * rate:
            verdict |= {
                "kept_up": False,
                "producer_limited": True,
                "why": f"the replayer could not keep the rate ({round(achieved):,} events/s)",
            }
        events = achieved * (end - start) / 1e6
        if events and self.cpu is not None:
            verdict["job_cpu_s_per_m_events"] = round(self.cpu.cpu_between(start, end) / events, 2)
            verdict["broker_cpu_s_per_m_events"] = round(
                self.broker_cpu.cpu_between(start, end) / events, 2
            )
        return verdict

    def drain(self, rate: int, timeout: float) -> None:
        """A lower rate until the input and internal lags are a few seconds of input."""
        self.replay.set_rate(rate)
        started = time.time()

        def small() -> bool:
            recent = [s for s in self.probe.samples[-5:] if s.at >= started]
            if len(recent) < 5:
                return False
            input_s = recent[-1].input_lag / max(1.0, rate)
            internal_s = recent[-1].internal_lag / max(1.0, rate)
            return input_s <= DRAINED_LAG_S and internal_s <= DRAINED_LAG_S

        wait(small, timeout, self.engine.alive)

    def wait_consuming(self) -> None:
        if not wait(lambda: self.probe.committed_input() > 0, 180, self.engine.alive):
            raise TimeoutError("no committed input within 180 s")


def ladder(run: Run, mode: CapacityMode, start: int) -> None:
    """bench/harness/capacity.py's ladder on the run's job: the highest rate kept up."""
    steps: list[dict[str, Any]] = []
    run.record |= {"start_rate": start, "steps": steps}
    run.replay.set_rate(start)
    run.wait_consuming()
    time.sleep(mode.warmup_s)
    good = bad = bisections = 0
    rate, retested, up = start, False, next_rates(mode.factor)
    for _ in range(mode.max_steps):
        step = run.step(rate, mode)
        steps.append(step)
        say(f"{run.job.name}: {rate:,} events/s: {step['why']}")
        if step.get("producer_limited") or step.get("file_exhausted"):
            break
        if not step["kept_up"] and not bad and not retested:
            retested = True  # a cold start's backlog must not end the ladder: once more
            step["retest"] = "next"
            run.drain(max(good, rate) // 2, mode.drain_timeout_s)
            continue
        if step["kept_up"]:
            good = rate
        else:
            bad = rate
        if not bad:
            rate = up(rate)
            continue
        if not good:
            rate = down(rate, mode.factor)
            if rate < MIN_RATE:
                break
            run.drain(rate // 2, mode.drain_timeout_s)
            continue
        middle = next_bisection(good, bad, bisections, mode)
        if middle is None:
            break
        bisections += 1
        run.drain(good // 2, mode.drain_timeout_s)
        rate = middle
    run.record["capacity_events_per_s"] = good or None
    run.record["first_not_kept_up"] = bad or None
    top = next((s for s in steps if s["rate"] == good and s["kept_up"]), None)
    if top is not None:
        run.record["at_capacity"] = {
            k: top.get(k) for k in ("job_cpu_s_per_m_events", "broker_cpu_s_per_m_events")
        }
    run.replay.set_rate(0)


def steady(run: Run, rate: int, mode: LiveMode) -> None:
    """The latency run's body: ``rate`` for the warm-up and the measured window."""
    run.record["rate"] = rate
    run.replay.set_rate(rate)
    run.wait_consuming()
    started = time.time()
    time.sleep(mode.latency_warmup_s + mode.latency_s)
    end = time.time()
    measured = (started + mode.latency_warmup_s, end)
    run.record["measured_window"] = [round(t, 3) for t in measured]
    run.record["achieved_events_per_s"] = round(run.replay.acked_per_s(*measured) or 0)
    inside = [s for s in run.probe.samples if measured[0] <= s.at <= measured[1]]
    run.record["kept_up"] = judge(inside, rate, 1.0)
    run.replay.set_rate(0)


class LiveSitting:
    """One broker, one events file, one Flink session cluster; every capacity and latency run."""

    def __init__(self, args: argparse.Namespace, queries: list[str], engines: list[str]) -> None:
        self.args, self.queries, self.engines = args, queries, engines
        self.stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-nexmark-live-"))
        self.events_file = self.tmp / "events.jsonl"
        self.out = args.results_dir / f"nexmark-live-{self.stamp}.json"
        self.mode = QUICK if args.quick else FULL
        self.bootstrap = ""
        self.broker_pid = 0
        self.cluster: FlinkSessionCluster | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.backlog = json.loads(args.backlog.read_text()) if args.backlog else None
        self.report: dict[str, Any] = {
            "phase": "live",
            "timestamp": self.stamp,
            "machine": machine(),
            "load_1m_at_start": load_1m(),
            "events": args.events,
            "partitions": args.partitions,
            "block": BLOCK,
            "runs_requested": args.runs,
            "latency_runs_requested": args.latency_runs,
            "queries": queries,
            "engines": engines,
            "quick": bool(args.quick),
            "mode": {**asdict(self.mode), "kept_up_when": "bench/harness/lag.py judge"},
            "method": __doc__,
            "latency_definition": DEFINITION,
            "backlog_file": str(args.backlog) if args.backlog else None,
            "runs": [],
        }

    def write(self) -> None:
        self.report |= summarize_live(self.report)
        self.args.results_dir.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.report, indent=2) + "\n")

    def expected(
        self, query: str, sent: int, latency: bool
    ) -> tuple[Expected, Dependencies, dict[int, tuple[int, bytes]]]:
        """The definitions over the file's first ``sent`` lines, what the latency needs (the
        rows' inputs only with ``latency``), and per partition the last line sent to it with
        its offset (`check_placement`)."""
        expected = Expected([query])
        deps = Dependencies(query, self.args.partitions)
        if latency:
            expected.on_row = deps.row
        tails: dict[int, tuple[int, bytes]] = {}
        for index, line in enumerate(lines(self.events_file, sent)):
            event = json.loads(line)
            deps.event(index, event)
            tails[deps.current[0]] = (deps.current[1], line)
            expected.add(event)
        return expected, deps, tails

    def start_rate(self, query: str, engine: str) -> int:
        """Half the engine's backlog median in ``--backlog`` (a ladder starts at or below
        half its expected capacity), else ``--start``."""
        if self.backlog is not None:
            figure = (self.backlog.get("results", {}).get(query, {}).get(engine) or {}).get(
                "events_per_s_median"
            )
            if figure:
                return max(MIN_RATE, int(round(figure / 2, -3)))
        return int(self.args.start)

    def capacity_runs(self) -> None:
        turn = 0
        for k in range(1, self.args.runs + 1):
            for query in self.queries:
                order = self.engines if turn % 2 == 0 else self.engines[::-1]
                turn += 1
                for engine in order:
                    mode = replace(self.mode.capacity, start=self.start_rate(query, engine))
                    say(f"capacity run {k}: {query} {engine} from {mode.start:,} events/s")
                    body = functools.partial(ladder, mode=mode, start=mode.start)
                    record = self.guarded("cap", query, engine, k, body, False)
                    record["first"] = order[0]
                    self.finished(record)

    def latency_runs(self) -> None:
        summary = summarize_live(self.report)["live_results"]
        turn = 0
        for query in self.queries:
            if query not in MEASURED:
                say(f"latency: {query}: {NOT_MEASURED[query]}")
                continue
            caps = [summary[query][e]["capacity_median"] for e in self.engines]
            if any(c is None for c in caps):
                say(f"latency: {query}: no capacity of every engine, no rate")
                continue
            rate = max(MIN_RATE // 2, int(round(min(caps) / 2, -2)))
            for k in range(1, self.args.latency_runs + 1):
                order = self.engines if turn % 2 == 0 else self.engines[::-1]
                turn += 1
                for engine in order:
                    say(f"latency run {k}: {query} {engine} at {rate:,} events/s")
                    body = functools.partial(steady, rate=rate, mode=self.mode)
                    record = self.guarded("lat", query, engine, k, body, True)
                    record["first"] = order[0]
                    record["half_of"] = min(caps)
                    self.finished(record)

    def guarded(
        self, kind: str, query: str, engine: str, k: int, body: Callable[[Run], None], watch: bool
    ) -> dict[str, Any]:
        """One run; a crash is its result (the sitting goes on)."""
        try:
            return Run(self, kind, query, engine, k).execute(body, watch)
        except Exception as exc:  # noqa: BLE001 - one run's crash is its result
            traceback.print_exc()
            failed = {"kind": kind, "run": k, "query": query, "engine": engine}
            return failed | {"exact": False, "error": repr(exc)}

    def finished(self, record: dict[str, Any]) -> None:
        self.report["runs"].append(record)
        self.write()
        latency = record.get("latency") or {}
        say(
            f"{record['kind']} {record['run']} {record['query']} {record['engine']}: "
            f"capacity {record.get('capacity_events_per_s')}, rate {record.get('rate')}, "
            f"p50 {latency.get('p50_ms')} p99 {latency.get('p99_ms')} ms, "
            f"exact={record['exact']}, error={record.get('error')}"
        )

    def main(self) -> None:
        args = self.args
        prepare_replayer()
        if "flink" in self.engines:
            FlinkNexmarkPeer(self.queries[0]).prepare()
        if args.events_file is not None:
            self.events_file = args.events_file
            self.report["events_file"] = {"reused": str(args.events_file)}
        else:
            binary = generate.find_binary()
            seconds = generate_file(binary, args.events, self.events_file)
            self.report["events_file"] = {
                "generator": f"nexmark crate {generate.VERSION} ({binary}), --no-wait --number "
                f"{args.events}",
                "seconds": round(seconds, 1),
            }
        self.report["events_file"]["bytes"] = self.events_file.stat().st_size
        broker = LocalBroker(
            port=args.port, controller_port=args.port + 1, data_dir=self.tmp / "kafka"
        )
        try:
            broker.start()
            pid = broker.running_pid()
            if pid is None:
                raise RuntimeError("the broker does not run")
            self.bootstrap, self.broker_pid = broker.bootstrap, pid
            if "flink" in self.engines:
                self.cluster = FlinkSessionCluster(self.tmp / "cluster", taskmanagers=2)
                self.procs = self.cluster.start_all()
            self.report["settings"] = {
                "processor": ProcessorPeer(pipeline="examples/nexmark/<query>.py").settings(),
                "flink": {q: FlinkNexmarkPeer(q, DEFAULT_RATE).settings() for q in self.queries},
            }
            self.write()
            self.capacity_runs()
            self.latency_runs()
        finally:
            stop_all(self.procs)
            broker.stop()
            if not args.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)
        self.write()
        print(live_markdown(self.report))
        print(f"wrote {self.out}")
