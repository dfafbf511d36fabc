"""What both Nexmark harnesses (bench/nexmark.py's backlog, bench/nexmark_live.py's live
phases) do around a run: the pipeline file of a query on a run's topics, a Flink job left
running cancelled, a run's topics deleted."""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.peers.flink_cluster import FlinkSessionCluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "nexmark"
SUBMIT_TIMEOUT_S = 900  # the Flink client plans the SQL: minutes on a loaded machine


def pipeline_file(query: str, events: str, output: str, path: Path) -> Path:
    """A pipeline file for ``processor --pipeline``: examples/nexmark/<query>.py's ``build``
    on this run's topics."""
    example = EXAMPLES / f"{query}.py"
    path.write_text(
        "import runpy\n\n"
        f"pipeline = runpy.run_path({str(example)!r})['build']"
        f"(events={events!r}, output={output!r})\n"
    )
    return path


def cancel_jobs(cluster: FlinkSessionCluster) -> None:
    """Cancels every job of the cluster that has not ended (a run that failed or timed out,
    a submission whose client was stopped after it submitted), so the next run is alone."""
    try:
        jobs = cluster.rest("/jobs").get("jobs", [])
    except (OSError, ValueError):
        return
    for entry in jobs:
        if entry.get("status") not in ("FINISHED", "FAILED", "CANCELED"):
            url = f"http://127.0.0.1:{cluster.rest_port}/jobs/{entry['id']}?mode=cancel"
            request = urllib.request.Request(url, method="PATCH")
            with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=10):
                pass


def delete_topics(bootstrap: str, output: str, job: str) -> None:
    """The run's output and the job's own topics (``<job>.*``): a sitting's disk stays
    bounded (q0's output of 10 M events is some 2 GB)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [
        t for t in admin.list_topics(timeout=10).topics if t == output or t.startswith(job + ".")
    ]
    for future in admin.delete_topics(names, operation_timeout=30).values():
        try:
            future.result(60)
        except Exception as exc:  # noqa: BLE001 - the sitting goes on; the disk holds it
            print(f"deleting a topic failed: {exc}", file=sys.stderr)
