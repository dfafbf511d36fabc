"""Chaos run: kill everything that can die, at seeded random moments, then verify the output.

    python -m tests.chaos --words 3000000 --faults 100 --seed 1     # by hand
    python -m tests.chaos --storage s3 ...                          # checkpoints in S3
    python -m tests.chaos --pipeline examples/two_shuffles.py:pipeline ...   # a user pipeline
    python -m tests.chaos --clicks --events 100000 --faults 40 --seed 1     # event time
    python -m tests.chaos --chained --events 200000 --faults 100 --seed 1   # timed stages
    python -m tests.chaos --loops --events 20000 --faults 40 --seed 1       # two loops
    python -m tests.chaos --postgres --words 300000 --faults 30 --seed 1    # into PostgreSQL
    python -m tests.chaos --pipeline tests/integration/milestones_pipeline.py:pipeline \
        --fallbacks --words 600000 --faults 30 --seed 1     # fallback restores, a process
        # after an aggregation
    (tests/integration/test_chaos.py runs a short version in CI)

Faults: SIGKILL of a worker (restarted after a random pause), SIGKILL of the coordinator
(restarted), SIGSTOP of a worker past the heartbeat timeout then SIGCONT (a zombie that must be
fenced), and one restart of the Kafka broker. With ``--storage s3`` the checkpoints go to a
local S3 API server (S3Proxy), and one fault is an outage of it (SIGKILL, restart). The
verifier checks the invariants of Kafka's own EOS system test on the committed output: per word
strictly increasing values ending at the exact count, no unknown word, nothing beyond what the
input implies, no open transaction.

With ``--pipeline`` the job runs that pipeline file instead (its one source topic gets the
corpus) and every sink topic is verified against the reference execution
(tests/reference.py, tests/sinkcheck.py), as is the dead-letter count. Each run
starts its own broker in a fresh directory, so a pipeline's fixed topic names cannot collide
with another run's.

With ``--clicks`` the job runs examples/clicks.py (windows and a join in event time) on
``--events`` clicks and a view per second of their event time (tests/timecheck.py), fed
without pauses while the faults happen and followed by a click and a view far ahead in event
time in every partition: the watermark closes every window of the data. Each window sink must
then hold every window exactly once with its exact count, the join sink every pair exactly
once, and nothing else, as computed directly from the input. The input's disorder is below
the sources' bound and the run's sources have an ``idle_ms`` longer than any fault, so no
record can be late: ``<job>.late`` (and the dead-letter topic) must stay empty. (A partition
that goes idle may make records after it late by design, and which ones depends on timing: a
hopping window's record can be late for some of its windows and counted in others. With the
example's own 5 s the job waits idle for the feed, and as the partitions' source tasks read
their first records a fraction of a second apart, the first of them are late: seed 1, 40
faults, made 715 records of the first 30 s of event time late.)

With ``--chained`` the job runs examples/promotions.py: two timed stages in a chain, clicks per
page and second in a window with 2 s of lateness, whose results are keyed again by site into
a ten-second window and by page into a join with a second topic's promotions. ``--events``
clicks and a promotion per 2 s of their event time (tests/chaincheck.py), with a set of
poison records (tests/integration/poison.py: lone surrogates, nesting past the parser, event
times out of range or not numbers, a record that grows past Kafka's limit once written
again, one of almost 1 MB that is no JSON) mixed into every 20,000 clicks at random places,
and a closing click and promotion in every partition. Clicks come up to 2.8 s before their
place in event time: many behind the watermark, within the lateness, none beyond it. The
sources' ``idle_ms`` is 2 s, shorter than the pauses: a killed worker stays down 1-5 s, a
stopped one 3-6 s. The feed starts before the job and never pauses for long, so a
failure-free run finds no partition idle and puts nothing into ``<job>.late``; the check is
that this one does not either, that each window of both stages and each pair is there once
with its exact value and nothing else is, and that the DLQ holds each poison record once, as
it came with its input offset in the headers (the one too large to shuffle is dead at the
shuffle's flush, when its batch is gone: a short repr naming the operator). No broker
restart: while the broker is down no
partition has records, every one may go idle by design, and which records are late after
depends on which source reads first.

With ``--postgres`` the job is word count into a Kafka topic and a PostgreSQL table
(tests/chaos_postgres.py), on a server of its own: the table's counts, every write that
committed and the prepared transactions left are checked too.

With ``--loops`` the job runs two loops (tests/loopcheck.py): connected components of
``--events`` random edges, checked per vertex against a union-find (components strictly
decreasing from the vertex itself to its component's smallest id), and retry jobs whose tries
are state, each done once after as many tries as it had.

With ``--brokers 3`` the run is on a local 3-node KRaft cluster (processor/localkafka/cluster.py)
whose topics, the input's too, have 3 copies and min.insync.replicas=2, and the one broker
restart gives way to broker faults (tests/broker_faults.py): SIGKILL of the leader of a
task's transaction coordinator partition and of a shuffle partitions' leader, SIGSTOP of a
broker past its session timeout, a rolling restart and a KRaft controller kill, about a
third of the faults, each kind in turn. Each fault that takes a broker away must move
leadership off it (counted per kind), and the summary gives per kind the time until every
task committed again.

PROCESSOR_TEST_CHAOS_PORT and PROCESSOR_TEST_CHAOS_S3_PORT move the ports
(the broker's controller takes the next one; a cluster's brokers P..P+2, controllers
P+100..P+102). PROCESSOR_TEST_CHAOS_KEEP=<dir>: a run that fails (raises, or its summary is
not exact) is copied there whole, the brokers' log dirs with it, for kafka-dump-log
(pytest keeps only its last three sessions' tmp_path, and every session on the machine
counts); ``python -m tests.postmortem <dir>`` reads a kept word-count run offline.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from processor.api.streams import Pipeline
from processor.commands import corpus
from processor.commands.counts import read_records, read_updates
from processor.kafka import clients
from processor.localkafka.broker import LocalBroker
from processor.localkafka.cluster import LocalCluster
from processor.plan.load import load_pipeline
from processor.plan.stages import plan
from processor.topics import INTERNAL_SUFFIXES, job_topic
from tests import anomalies, broker_faults, network_faults, reference
from tests.anomalies import Anomalies
from tests.chaos_feeds import SOURCE_PARTITIONS, ChainedFeed, ClicksFeed, LoopsFeed
from tests.chaos_postgres import ENV as PG_ENV
from tests.chaos_postgres import PostgresChaos
from tests.chaos_summary import Summary
from tests.conftest import TEST_REGION, create_bucket
from tests.integration.harness import JobRun, control_messages, recovery_times
from tests.netns import TestNetwork
from tests.s3server import S3Server
from tests.sinkcheck import check_sink
from tests.workers import worker_port

PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_CHAOS_PORT", "19292")))
S3_PORT = worker_port(int(os.environ.get("PROCESSOR_TEST_CHAOS_S3_PORT", "19392")))
S3_BUCKET = "chaos"
KEEP_ENV = "PROCESSOR_TEST_CHAOS_KEEP"  # a directory to copy each failed run into
WORKERS = 3
CLICKS_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "clicks.py"
CHAINED_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "promotions.py"
NEVER_IDLE_MS = 3_600_000  # the clicks run's idle_ms: longer than any fault and the run
# The chained run's idle_ms: shorter than its longer pauses (worker SIGKILL 1-5 s before the
# restart, SIGSTOP 3-6 s), far longer than the feed's gaps.
CHAINED_IDLE_MS = 2000
# The fault of ``fallbacks``: a keyed task's committed snapshot lost, every worker SIGKILLed.
FALLBACK = "snapshot lost, workers SIGKILL (fallback)"
CLUSTER_WORKER_TIMEOUT_MS = 5000  # PROCESSOR_WORKER_TIMEOUT_MS of a run on a cluster
# Every fault of a cluster run by name: the brokers' and, with a test network, the partitions.
CLUSTER_FAULTS: dict[str, broker_faults.Fault] = {**broker_faults.FAULTS, **network_faults.FAULTS}


def run_chaos(
    workdir: Path,
    words: int,
    faults: int,
    seed: int,
    broker_restart: bool,
    s3: bool = False,
    pipeline: str = "",
    port: int = PORT,
    s3_port: int = S3_PORT,
    clicks: int = 0,
    chained: int = 0,
    loops: int = 0,
    brokers: int = 1,
    broker_kinds: list[str] | None = None,
    network: TestNetwork | None = None,
    postgres: bool = False,
    fallbacks: bool = False,
) -> Summary:
    """``pipeline``: ``file.py:attribute`` to run instead of the built-in word count;
    ``clicks``: run examples/clicks.py on that many clicks instead (``words`` is unused);
    ``chained``: run examples/promotions.py on that many clicks, with poison records;
    ``loops``: run both loops of tests/loopcheck.py on that many edges (and a fifth as many
    retry jobs);
    ``brokers``: above 1, a local cluster with broker faults (``broker_restart`` unused) of
    ``broker_kinds`` (names in tests/broker_faults.py's or tests/network_faults.py's FAULTS;
    default: all those of brokers, and the network partitions with ``network``);
    ``network``: a test network of `network_faults.chaos_network` for the brokers and
    workers to run in (a cluster only);
    ``postgres``: word count into Kafka and PostgreSQL (tests/chaos_postgres.py);
    ``fallbacks``: every third process fault (the second, fifth, ...) loses a keyed task's
    committed snapshot and SIGKILLs every worker (`_fall_back`): its restore falls back to an
    older snapshot and replays up to the committed checkpoint (local storage only)."""
    rng = random.Random(seed)
    pg = PostgresChaos(port + 50) if postgres else None
    if pg is not None:
        pipeline = pg.spec
    timed = clicks or chained
    summary = Summary(words=0 if timed else words)
    job_settings: dict[str, str] = {}
    graph: Pipeline | None = None
    if timed:
        example, idle = (
            (CLICKS_EXAMPLE, NEVER_IDLE_MS) if clicks else (CHAINED_EXAMPLE, CHAINED_IDLE_MS)
        )
        spec = workdir.resolve() / f"{example.stem}_pipeline.py"
        build = f"runpy.run_path({str(example)!r})['build']"
        spec.write_text(f"import runpy\n\npipeline = {build}(idle_ms={idle})\n")
        graph, _ = load_pipeline(str(spec))
        job_settings = {"pipeline": str(spec), "input_topic": "clicks"}
        if chained:  # three keyed stages: 12 keyed tasks rather than 24 on a small machine
            job_settings["shuffle_partitions"] = "4"
    elif loops:
        spec = workdir.resolve() / "loops_pipeline.py"
        spec.write_text("from tests.loopcheck import build\n\npipeline = build()\n")
        graph, _ = load_pipeline(str(spec))
        job_settings = {"pipeline": str(spec), "input_topic": "edges", "shuffle_partitions": "4"}
    elif pipeline:
        pipeline = _absolute(pipeline)  # the same file whatever the processes' directory
        graph, stages = load_pipeline(pipeline)
        if len(stages.source_topics) != 1:
            raise ValueError(f"{pipeline}: the chaos run feeds one source topic, not several")
        job_settings = {"pipeline": pipeline, "input_topic": stages.source_topics[0]}
    broker: LocalBroker | LocalCluster
    if brokers > 1:
        # A small heap: three JVMs next to the job's processes on a small machine.
        cluster = {"data_dir": workdir / "kafka", "heap": "384m"}
        if network is not None:
            broker = network_faults.cluster_on(network, brokers, port, **cluster)
        else:
            broker = LocalCluster(nodes=brokers, port=port, **cluster)  # type: ignore[arg-type]
        broker.start(timeout=300)
        # Set rather than taken from the brokers listed: a coordinator restarted while a
        # broker is down must not create a topic with fewer copies.
        job_settings["replication_factor"] = str(min(3, brokers))
        # Heartbeats go through the control topic's leader, which a broker fault takes away
        # for seconds, and three brokers' JVMs load a small machine: a worker is dead after
        # 5 s without one rather than 2 (on a 2-core machine under load 40, 2 s moved every
        # task back and forth and no checkpoint completed).
        job_settings |= {"worker_timeout_ms": str(CLUSTER_WORKER_TIMEOUT_MS)}
        broker_restart = False
    else:
        if network is not None:
            raise ValueError("a test network needs a cluster (brokers > 1)")
        broker = LocalBroker(port=port, controller_port=port + 1, data_dir=workdir / "kafka")
        broker.start(timeout=120)
    s3_server: S3Server | None = None
    storage: dict[str, str] = {}
    if s3:
        s3_server = S3Server(port=s3_port, data_dir=workdir / "s3")
        s3_server.start(timeout=120)
        create_bucket(s3_server, S3_BUCKET)
        storage = {
            "checkpoint_dir": f"s3://{S3_BUCKET}/chaos",
            "s3_endpoint_url": s3_server.endpoint_url,
            "s3_region": TEST_REGION,
            "s3_access_key_id": s3_server.access_key_id,
            "s3_secret_access_key": s3_server.secret_access_key,
        }
    # Each S3 checkpoint is a dozen requests per task: 1 s rather than 500 ms between them.
    partitions = SOURCE_PARTITIONS if timed or loops else 4
    run = JobRun(
        broker.bootstrap, workdir, partitions, 1000 if s3 else 500, **storage, **job_settings
    )
    if network is not None:
        network_faults.place_workers(network, run, WORKERS)
    if pg is not None:
        run.env[PG_ENV] = pg.dsn
    feed: ClicksFeed | ChainedFeed | LoopsFeed | None = None
    if loops:
        feed = LoopsFeed(run, loops, seed)
        summary.events = len(feed.edges) + len(feed.jobs)
    elif clicks:
        feed = ClicksFeed(run, clicks, seed)
        summary.events = len(feed.clicks) + len(feed.views)
    elif chained:
        feed = ChainedFeed(run, chained, seed)
        summary.events = len(feed.clicks) + len(feed.promotions)
        # Fed from before the job starts: with a short idle_ms, partitions that the job had
        # found empty for that long would be idle when the records come, and some of these
        # late (by design, and depending on timing).
        feed.start(seconds=10.0 + faults * 3.3)
    started = time.monotonic()
    kills: list[tuple[float, str]] = []  # (time, worker id) of worker kills, for recovery times
    cluster_faults: broker_faults.ClusterFaults | None = None
    cluster_plan: dict[int, str] = {}
    if isinstance(broker, LocalCluster):
        cluster_faults = broker_faults.ClusterFaults(
            broker, run, rng, workdir / "faults.log", network=network
        )
        kinds = broker_kinds
        if kinds is None:
            kinds = list(broker_faults.FAULTS)
            if network is not None:
                kinds += list(network_faults.FAULTS)
        cluster_plan = broker_faults.plan(rng, faults, kinds, known=CLUSTER_FAULTS)
    failed = True  # until the run is done and exact
    try:
        run.start_coordinator()
        for i in range(WORKERS):
            run.start_worker(i)
        # The input keeps coming while faults happen: about 1.5 faults per second of feed.
        if isinstance(feed, ClicksFeed | LoopsFeed):  # once the job runs, as long as the faults
            run.wait_for_checkpoints(1, timeout=120)
            feed.start(seconds=max(10.0, faults * 2.0))
        elif feed is None:
            # Broker faults last longer (leadership moves after the session timeout, a node
            # restarts and catches up: 60-125 s each on a loaded 2-core machine): input keeps
            # coming during them too, or the job is idle and begins no checkpoint after them.
            slow = sum(
                180 if k == broker_faults.ROLLING_RESTART else 90 for k in cluster_plan.values()
            )
            run.feed(words, seconds=max(10.0, faults * 0.7 + slow), seed=seed)
        run.wait_for_checkpoints(2, timeout=120)
        broker_at = rng.randrange(faults) if broker_restart else -1
        taken = {broker_at, *cluster_plan}
        outage_at = rng.choice([n for n in range(faults) if n not in taken]) if s3 else -1
        for n in range(faults):
            if n in cluster_plan and cluster_faults is not None:
                kind = cluster_plan[n]
                CLUSTER_FAULTS[kind](cluster_faults)
                summary.faults[kind] += 1
            elif n == broker_at:
                broker.stop()
                time.sleep(rng.uniform(0.5, 2))
                broker.start(timeout=120)
                summary.faults["broker restart"] += 1
            elif n == outage_at and s3_server is not None:
                s3_server.stop(sig=signal.SIGKILL)
                time.sleep(rng.uniform(1, 4))  # snapshots fail, restores wait for it
                s3_server.start(timeout=120)
                summary.faults["S3 outage"] += 1
            elif fallbacks and n % 3 == 1 and not s3:
                _fall_back(run, rng)
                summary.faults[FALLBACK] += 1
            else:
                kind = rng.choices(["kill", "coordinator", "stop"], weights=[6, 2, 1])[0]
                _inject(
                    run,
                    rng,
                    kind,
                    kills,
                    summary,
                    long_pauses=bool(chained),
                    stop_s=CLUSTER_WORKER_TIMEOUT_MS / 1000 + 1 if brokers > 1 else 3.0,
                )
            time.sleep(rng.uniform(0.2, 1.0))
        for i in run.dead_workers():
            run.start_worker(i)
        # The feed's span was planned from the faults' expected lengths: the faults are
        # over, so the rest of the input goes out now (a 200-fault run's faults ended 23 min
        # before its feed, and drain gave up on the feed).
        run.hurry_feed()
        if graph is None:
            run.finish(timeout=900)
        else:
            run.drain(timeout=900)
        summary.duration_s = time.monotonic() - started
        if feed is not None:
            feed.verify(summary)
        elif graph is None:
            _verify(run, summary)
        else:
            _verify_pipeline(run, graph, corpus.lines(words, seed=seed), summary)
        if pg is not None:
            pg.verify(run, corpus.lines(words, seed=seed), summary)
        if feed is None:
            summary.anomalies = _anomalies(run, broker, graph)
        messages = control_messages(run)
        summary.recovery_s = recovery_times(messages, kills)
        if cluster_faults is not None:
            network_faults.worker_moves(messages, cluster_faults.records)
            for record in cluster_faults.records:
                summary.moved_s.setdefault(record.kind, []).append(record.moved_s)
                summary.unconfirmed += record.confirmed is False
            summary.recovery_by_kind = broker_faults.recovery(messages, cluster_faults.records)
        failed = not summary.exact
    except AssertionError:
        if feed is None:  # what the brokers' logs say of the failed run's transactions
            _print_anomalies(run, broker, graph)
        _print_recoveries(workdir)
        raise
    finally:
        run.stop()
        broker.stop()
        if s3_server is not None:
            s3_server.stop()
        if pg is not None:
            pg.stop()
        if failed:
            _keep(workdir, seed)
    return summary


def _keep(workdir: Path, seed: int) -> None:
    """A failed run's directory copied under $PROCESSOR_TEST_CHAOS_KEEP, if set."""
    keep = os.environ.get(KEEP_ENV)
    if not keep:
        return
    target = Path(keep) / f"chaos-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    try:
        shutil.copytree(workdir, target, symlinks=True)
    except OSError as exc:  # never hide the run's own failure
        print(f"chaos run not kept in {target}: {exc}", file=sys.stderr)
    else:
        print(f"chaos run kept in {target}", file=sys.stderr)


def _anomalies(
    run: JobRun, broker: LocalBroker | LocalCluster, graph: Pipeline | None
) -> Anomalies:
    """Transaction anomalies of the job's sinks (reads and transactions) and shuffles
    (transactions), from the brokers' own logs (tests/anomalies.py)."""
    job = run.job
    sinks = [run.settings.output_topic] if graph is None else plan(graph).sink_topics
    # The job's other topics: its shuffles (the harness's input and output topics share the
    # job's prefix too).
    internal = {job_topic(job, suffix) for suffix in INTERNAL_SUFFIXES}
    internal |= {run.settings.input_topic, *sinks}
    topics = clients.admin(run.settings).list_topics(timeout=30).topics
    shuffles = [t for t in topics if t.startswith(f"{job}.") and t not in internal]
    nodes = broker.brokers() if isinstance(broker, LocalCluster) else [broker]
    # The group's offset commits are part of every task's transactions: an epoch whose output
    # committed while its offsets were aborted (or the reverse) is torn there.
    others = [*shuffles, anomalies.OFFSETS_LOG]
    return anomalies.check(
        broker.bootstrap, anomalies.log_dirs(nodes), sinks, f"{job}.", other_topics=others
    )


def _print_anomalies(
    run: JobRun, broker: LocalBroker | LocalCluster, graph: Pipeline | None
) -> None:
    """A failed verification's transaction anomalies on stderr (a CI log keeps no run)."""
    try:
        found = _anomalies(run, broker, graph)
    except Exception as exc:  # noqa: BLE001 - a diagnosis; the failure is raised anyway
        found_text = f"could not be read: {exc!r}"
    else:
        found_text = json.dumps(found.to_json() | {"examples": found.examples})
    print(f"chaos: the failed run's transaction anomalies: {found_text}", file=sys.stderr)


# The lines of the processes' logs that say where each task resumed, and why it stopped.
_RECOVERY = re.compile(
    r"resuming|restored|falling back|declined|failed|fenced|assignment \d+|missed|"
    r"complete in|last completed"
)
_CHECKPOINT_FAILED = re.compile(r"checkpoints? (\d+ )?failed|more checkpoints failed")


def _print_recoveries(workdir: Path, most: int = 300) -> None:
    """A failed run's recoveries on stderr, in time order: each task's restores and resume
    positions, its failures, the assignments (a CI log keeps no run directory)."""
    lines: list[str] = []
    for path in sorted(workdir.glob("*.log")):
        with path.open(errors="replace") as log:
            lines += [
                line.rstrip()[:240]
                for line in log
                if _RECOVERY.search(line) and not _CHECKPOINT_FAILED.search(line)
            ]
    lines.sort()  # each starts with its time
    if len(lines) > most:
        lines = [*lines[: most // 2], "...", *lines[-most // 2 :]]
    print("chaos: the failed run's recoveries:\n" + "\n".join(lines), file=sys.stderr)


def _inject(
    run: JobRun,
    rng: random.Random,
    kind: str,
    kills: list[tuple[float, str]],
    summary: Summary,
    long_pauses: bool = False,
    stop_s: float = 3.0,
) -> None:
    """``long_pauses``: a killed worker stays down 1-5 s rather than up to 3, a stopped one
    3-6 s rather than ``stop_s`` (the chained run's sources go idle after 2 s); ``stop_s``:
    past the job's worker timeout, so that a stopped worker's tasks move."""
    i = rng.randrange(WORKERS)
    if kind == "kill":
        if run.workers[i].poll() is None:
            kills.append((time.time(), f"worker-{i}"))
            run.kill_worker(i)
            down = rng.uniform(1, 5) if long_pauses else rng.uniform(0, 3)
            _say(f"worker SIGKILL: worker-{i}, restarted after {down:.1f} s")
            time.sleep(down)
        run.start_worker(i)
        summary.faults["worker SIGKILL"] += 1
    elif kind == "coordinator":
        run.kill_coordinator()
        down = rng.uniform(0, 2)
        _say(f"coordinator SIGKILL, restarted after {down:.1f} s")
        time.sleep(down)
        run.start_coordinator()
        summary.faults["coordinator SIGKILL"] += 1
    else:
        if run.workers[i].poll() is not None:
            run.start_worker(i)
            return
        run.kill_worker(i, signal.SIGSTOP)
        # Past the heartbeat timeout: its tasks move and fence it.
        stopped = rng.uniform(3, 6) if long_pauses else stop_s
        _say(f"worker SIGSTOP: worker-{i}, SIGCONT after {stopped:.1f} s")
        time.sleep(stopped)
        run.kill_worker(i, signal.SIGCONT)
        summary.faults["worker SIGSTOP (zombie)"] += 1


def _say(text: str) -> None:
    """A process fault on stderr, timed as the cluster's faults are (a CI log keeps these)."""
    print(f"chaos: {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def _fall_back(run: JobRun, rng: random.Random) -> None:
    """A keyed task's committed snapshot lost, then every worker SIGKILLed: the task's
    restore falls back to an older snapshot. The workers are stopped first, so that no newer
    checkpoint commits between the loss and the kill."""
    alive = [i for i, worker in run.workers.items() if worker.poll() is None]
    for i in alive:
        run.kill_worker(i, signal.SIGSTOP)
    root = run.workdir / "checkpoints" / run.job
    tasks = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    manifests = [run.committed_manifest(*_task(p.name)) for p in tasks]
    committed = [m for m in manifests if m is not None]
    if committed:
        rng.choice(committed).unlink()
    for i in alive:
        run.kill_worker(i)
    time.sleep(rng.uniform(0, 2))
    for i in range(WORKERS):
        run.start_worker(i)


def _task(name: str) -> tuple[str, int]:
    """A keyed task's stage and partition, from its name ``<stage>-<partition>``."""
    stage, _, partition = name.rpartition("-")
    return stage, int(partition)


def _verify(run: JobRun, summary: Summary) -> None:
    final, updates = read_updates(run.settings, run.settings.output_topic, timeout=120)
    summary.records_verified = sum(len(v) for v in updates.values())
    summary.unknown = len(final.keys() - run.expected.keys())
    for word, exact in run.expected.items():
        values = updates.get(word, [])
        summary.duplicated += sum(1 for a, b in itertools.pairwise(values) if a >= b)
        last = values[-1] if values else 0
        summary.lost += max(0, exact - last)
        summary.duplicated += max(0, last - exact)


def _verify_pipeline(run: JobRun, graph: Pipeline, lines: Iterable[str], summary: Summary) -> None:
    """Every sink against the reference execution of the same input (the feed's corpus)."""
    expected = reference.run(graph, {run.settings.input_topic: [line.encode() for line in lines]})
    for topic, output in sorted(expected.sinks.items()):
        check = check_sink(output, read_records(run.settings, topic, timeout=120))
        summary.sinks[topic] = check
        summary.records_verified += check.records
        summary.lost += check.lost
        summary.duplicated += check.duplicated
        summary.unknown += check.unknown
        summary.wrong += check.wrong
    dead = len(read_records(run.settings, run.settings.dlq_topic, timeout=120))
    summary.wrong += abs(dead - len(expected.dead))


def _absolute(spec: str) -> str:
    path, colon, attr = spec.rpartition(":")
    if not colon or not path.endswith(".py"):
        path, colon, attr = spec, ":", "pipeline"
    return f"{Path(path).resolve()}{colon}{attr}"


def main() -> int:
    parser = argparse.ArgumentParser(description="Chaos run with an exactly-once verifier.")
    parser.add_argument("--words", type=int, default=3_000_000)
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-broker-restart", action="store_true")
    parser.add_argument("--storage", choices=["dir", "s3"], default="dir")
    parser.add_argument(
        "--pipeline", default="", help="file.py:attribute to run instead of the word count"
    )
    parser.add_argument(
        "--clicks",
        action="store_true",
        help="run examples/clicks.py (event-time windows and a join) instead",
    )
    parser.add_argument(
        "--chained",
        action="store_true",
        help="run examples/promotions.py (a window with lateness feeding a window and a "
        "join) with poison records instead",
    )
    parser.add_argument(
        "--loops", action="store_true", help="run two loops (tests/loopcheck.py) instead"
    )
    parser.add_argument(
        "--events",
        type=int,
        default=100_000,
        help="--clicks, --chained: clicks to feed; --loops: edges",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="3: on a local 3-node cluster, with broker faults instead of the broker restart",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=PORT,
        help="the broker's (controller: +1); a cluster's: brokers P.., controllers P+100..",
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="with --brokers 3: brokers and workers in network namespaces of their own, and "
        "network partitions (a worker or a broker cut off 20-60 s) among the faults (root)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="word count into a Kafka topic and a PostgreSQL table (tests/chaos_postgres.py)",
    )
    parser.add_argument(
        "--fallbacks",
        action="store_true",
        help="every third process fault loses a keyed task's committed snapshot (a fallback)",
    )
    parser.add_argument("--s3-port", type=int, default=S3_PORT)
    parser.add_argument("--keep", default="", help="a directory for the logs, kept afterwards")
    args = parser.parse_args()
    if args.netns and (args.brokers < 2 or args.storage != "dir"):
        parser.error("--netns needs --brokers 3 and checkpoints in a directory")
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-"))
        network = (
            stack.enter_context(network_faults.chaos_network(args.brokers, WORKERS))
            if args.netns
            else None
        )
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        summary = run_chaos(
            workdir,
            args.words,
            args.faults,
            args.seed,
            not args.no_broker_restart and not args.chained,
            s3=args.storage == "s3",
            pipeline=args.pipeline,
            port=args.port,
            s3_port=args.s3_port,
            clicks=args.events if args.clicks else 0,
            chained=args.events if args.chained else 0,
            loops=args.events if args.loops else 0,
            brokers=args.brokers,
            # As without the cluster: a broker away leaves partitions without records
            # for longer than the chained run's idle_ms (see above).
            broker_kinds=[] if args.chained else None,
            network=network,
            postgres=args.postgres,
            fallbacks=args.fallbacks,
        )
    report = summary.to_json()
    print(json.dumps(report, indent=1))
    ok = summary.exact
    print("chaos run: " + ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
