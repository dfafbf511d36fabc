"""The coordinator's status page, JSON API and /metrics, and `processor status`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.harness import JobRun, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as page:
        return str(page.read().decode())


def test_status_api_page_metrics_and_cli(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300)
    try:
        run.produce(b"to be or not to be %d" % i for i in range(500))
        run.coordinator = run._spawn("coordinator", "coordinator", PROCESSOR_METRICS_PORT=str(port))
        worker_port = _free_port()
        run.start_worker(0, metrics_port=worker_port)
        run.start_worker(1)

        def checkpoints_done() -> bool:
            try:
                doc = json.loads(_get(base + "/api/status"))
            except OSError:
                return False
            return int(doc["checkpoints"].get("completed") or 0) >= 3

        wait_until(checkpoints_done, 60, "three checkpoints in the status API")
        doc = json.loads(_get(base + "/api/status"))
        assert doc["job"] == run.job
        assert {t["task"] for t in doc["tasks"]} == {f"split-{i}" for i in range(4)} | {
            f"count-{i}" for i in range(8)
        }
        assert {w["worker"] for w in doc["workers"]} == {"worker-0", "worker-1"}
        newest = doc["checkpoints"]["history"][0]
        assert newest["status"] == "completed" and newest["duration_s"] > 0
        assert newest["slowest_task"]
        # Each stage's rate and how busy its tasks were over the last checkpoint (their
        # threads' CPU time, from the acks); each task's hour of rate and lag.
        for stage in doc["stages"]:
            assert stage["records_per_s"] is not None, stage
            assert 0 < stage["busy"] <= 1, stage
        assert all(len(t["hour"]["lag"]) >= 1 for t in doc["tasks"])

        page = _get(base + "/")
        assert f"job {run.job}" in page and "Checkpoints" in page and "worker-1" in page

        names = {f.name for f in text_string_to_metric_families(_get(base + "/metrics"))}
        assert {
            "processor_checkpoints_completed",
            "processor_last_completed_checkpoint_id",
            "processor_checkpoint_duration_seconds",
            "processor_workers_alive",
        } <= names

        # Both services report their main loop alive; every sample a worker exports carries
        # its worker id.
        assert _get(base + "/healthz").startswith("ok:")
        worker_base = f"http://127.0.0.1:{worker_port}"
        assert _get(worker_base + "/healthz").startswith("ok:")
        samples = [
            sample
            for family in text_string_to_metric_families(_get(worker_base + "/metrics"))
            for sample in family.samples
        ]
        assert any(s.name == "processor_records_in_total" for s in samples)
        assert {s.labels.get("worker") for s in samples} == {"worker-0"}

        cli = subprocess.run(
            [sys.executable, "-m", "processor", "status", "--url", base],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0, cli.stderr
        assert f"job {run.job}: last completed checkpoint" in cli.stdout
        assert "split-3" in cli.stdout and "worker-1" in cli.stdout
    finally:
        run.stop()


def test_status_cli_without_a_coordinator_is_one_line() -> None:
    cli = subprocess.run(
        [sys.executable, "-m", "processor", "status", "--url", f"http://127.0.0.1:{_free_port()}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cli.returncode == 1
    assert len(cli.stderr.strip().splitlines()) == 1
    assert "no coordinator answers" in cli.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_status_page_renders_in_headless_chromium(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    run = JobRun(kafka_bootstrap, tmp_path, interval_ms=300)
    try:
        shots = os.environ.get("PROCESSOR_SCREENSHOT_DIR")
        run.produce([b"hello status page"])
        run.coordinator = run._spawn("coordinator", "coordinator", PROCESSOR_METRICS_PORT=str(port))
        run.start_worker(0)
        if shots:  # the README's picture: a job at work for a while, not one that is idle
            run.feed(6_000_000, seconds=60)
            wait_until(lambda: run.log("coordinator").count(" complete in ") >= 40, 120, "work")
        wait_until(lambda: run.log("coordinator").count(" complete in ") >= 3, 60, "checkpoints")
        # PROCESSOR_SCREENSHOT_DIR=docs refreshes docs/status-page.png, the README's picture.
        shot = Path(shots or tmp_path) / "status-page.png"
        dom = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--window-size=1250,720",
                f"--screenshot={shot}",
                "--dump-dom",
                base + "/",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shot.stat().st_size > 10_000
        assert "Checkpoints" in dom.stdout and "completed" in dom.stdout
        # The graph and the chart, as the browser built them: both stages, the shuffle's
        # arrow, a bar per completed checkpoint.
        graph = dom.stdout[dom.stdout.index('<svg class="graph"') :]
        graph = graph[: graph.index("</svg>")]
        assert graph.count("<rect") == 2 and graph.count("<line") == 1
        assert "(source)" in graph and "(keyed)" in graph and "records/s" in graph
        chart = dom.stdout[dom.stdout.index('<svg class="chart"') :]
        assert chart[: chart.index("</svg>")].count('class="duration"') >= 2
        # Each task's records/s and lag over the hour, as sparklines in the tasks' table.
        assert dom.stdout.count('<svg class="spark"') >= 2
    finally:
        run.stop()
