"""Each Nexmark query's output on a real broker against its definition (issue #42).

    python bench/nexmark_check.py --engine flink [--queries q0,q5] [--events 1500]
        [--seed 42] [--port 26092] [--partitions 2] [--keep DIR]

Starts its own broker (``--port`` and the next port), writes ``--events`` events of
tests/nexmark_data.py's generator into the topic ``nexmark``, starts a Flink session cluster
(bench/peers/flink_cluster.py: a JobManager and two one-slot TaskManagers), then per query
submits the Flink SQL job with a bounded source (bench/peers/flink_nexmark_peer.py), waits
until it has FINISHED (the end of input closes every window; the final checkpoint commits the
last transaction), reads its output read_committed and compares it with the direct
computation of the query over the same events (bench/nexmark_output.py). Prints one line per
query and a JSON summary; exit 1 if a query did not match.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness.measure import create_topic
from bench.nexmark_load import load
from bench.nexmark_output import compare, expected, got
from bench.peers.base import Job
from bench.peers.flink_cluster import FlinkSessionCluster, stop_all
from bench.peers.flink_nexmark_peer import QUERIES, FlinkNexmarkPeer
from processor.localkafka.broker import LocalBroker
from tests import nexmark_data as nexmark

TOPIC = "nexmark"


def run_query(
    cluster: FlinkSessionCluster,
    bootstrap: str,
    query: str,
    stream: list[nexmark.Event],
    workdir: Path,
    timeout: float,
    topic: str = TOPIC,
) -> dict[str, Any]:
    output = f"{topic}-{query}-flink"
    create_topic(bootstrap, output, 2)
    job = Job(
        bootstrap=bootstrap,
        name=f"nexmark-{query}-{int(time.time())}",
        input_topic=topic,
        output_topic=output,
        workdir=workdir / query,
        until_idle=True,
    )
    started = time.monotonic()
    job_id = FlinkNexmarkPeer(query).submit(cluster, job)
    state = cluster.wait_final(job_id, timeout)
    seconds = round(time.monotonic() - started, 1)
    if state != "FINISHED":
        return {"query": query, "state": state, "seconds": seconds, "exact": False}
    result = compare(expected(query, stream), got(query, bootstrap, output))
    return {"query": query, "state": state, "seconds": seconds, **result}


def check(
    bootstrap: str,
    queries: list[str],
    stream: list[nexmark.Event],
    workdir: Path,
    partitions: int,
    timeout: float,
    topic: str = TOPIC,
    say: Any = print,
) -> list[dict[str, Any]]:
    """Loads ``stream`` into ``topic`` and runs each query on one session cluster; the
    results."""
    FlinkNexmarkPeer(queries[0]).prepare()
    load(bootstrap, topic, stream, partitions)
    cluster = FlinkSessionCluster(workdir / "cluster", taskmanagers=2)
    procs = cluster.start_all()
    results = []
    try:
        for query in queries:
            result = run_query(cluster, bootstrap, query, stream, workdir, timeout, topic)
            say(
                f"{query}: {result['state']} in {result['seconds']} s, "
                + ("exact" if result["exact"] else "DIFFERS")
                + (
                    f" ({result['rows']} rows; missing {result['missing']}, extra "
                    f"{result['extra']})"
                    if "rows" in result
                    else ""
                )
            )
            results.append(result)
    finally:
        stop_all(procs)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["flink"], default="flink")
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--events", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--port", type=int, default=26092)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180, help="per query, seconds")
    parser.add_argument("--keep", type=Path, help="work directory to keep (logs, SQL)")
    args = parser.parse_args()
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if q not in QUERIES]
    if unknown:
        parser.error(f"unknown queries: {unknown}")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="nexmark-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=workdir / "kafka")
    stream = nexmark.events(args.events, seed=args.seed)
    try:
        broker.start()
        results = check(broker.bootstrap, queries, stream, workdir, args.partitions, args.timeout)
    finally:
        broker.stop()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"engine": args.engine, "seed": args.seed, "results": results}, indent=2))
    return 0 if all(r["exact"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
