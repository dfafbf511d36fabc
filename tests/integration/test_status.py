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

from processor.coordinator.status import page as status
from processor.health import LoopHealth
from tests.integration.harness import JobRun, wait_until

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
# What chromium logs (--enable-logging=stderr) when a page's Content-Security-Policy blocks
# something: "Executing inline script violates the following Content Security Policy ...".
CSP_VIOLATION = "Content Security Policy"


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


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Debian's chromium, headless, loads ``url``: its DOM as built on stdout, its console
    (CSP violations included) on stderr."""
    return subprocess.run(
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
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *extra,
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The page's console lines among chromium's log."""
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


@needs_chromium
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
        dom = _chromium(
            base + "/", tmp_path / "profile", "--window-size=1250,720", f"--screenshot={shot}"
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
        # All of it under the page's own Content-Security-Policy: the browser refused nothing.
        assert not [line for line in _console(dom) if CSP_VIOLATION in line], dom.stderr
    finally:
        run.stop()


# Names a topic writer or a pipeline author controls, shown on the page: a worker id (from
# the control topic), a task's failure reason (an exception's text), operator names.
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">"


def _hostile_board() -> status.StatusBoard:
    board = status.StatusBoard("wc")
    board.publish(
        {
            **board.document,
            "updated_at": 1.0,
            "stages": [
                {
                    "stage": "split",
                    "kind": "source",
                    "input": "lines",
                    "tasks": 1,
                    "operators": [HOSTILE],
                    "records_per_s": 1.0,
                    "busy": 0.5,
                },
            ],
            "tasks": [
                {"task": "split-0", "worker": HOSTILE, "state": "failed", "reason": HOSTILE},
            ],
            "workers": [{"worker": HOSTILE, "alive": True, "last_seen_s": 0.5, "tasks": 1}],
        }
    )
    return board


@needs_chromium
def test_hostile_names_show_as_text_and_the_page_runs_under_its_csp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page escapes what it shows: markup in a worker id, an operator name or a failure
    reason is text, nothing of it runs, and the browser reports no CSP violation. The
    page's own hashed script runs: it fetches the page again (connect-src 'self') and swaps
    the body in, so the server renders the page more than once."""
    renders: list[int] = []
    render = status.render_html

    def counted(doc: dict[str, object]) -> str:
        renders.append(1)
        return render(doc)

    monkeypatch.setattr(status, "render_html", counted)
    server = status.serve(_hostile_board(), "127.0.0.1", 0, LoopHealth(30))
    try:
        url = f"http://127.0.0.1:{server.server_port}/"
        dom = _chromium(url, tmp_path / "profile", "--virtual-time-budget=7000")
    finally:
        server.shutdown()
    assert dom.returncode == 0, dom.stderr
    assert "<title>processor: wc</title>" in dom.stdout  # neither 'pwned' nor 'img'
    assert dom.stdout.count("&lt;script&gt;document.title='pwned'&lt;/script&gt;") >= 3
    assert "<script>document.title" not in dom.stdout and "<img" not in dom.stdout
    assert "Job graph" in dom.stdout and dom.stdout.count('<svg class="graph"') == 1
    assert not [line for line in _console(dom) if CSP_VIOLATION in line], dom.stderr
    assert len(renders) >= 2, "the page's own script did not fetch it again"


@needs_chromium
def test_an_inline_script_that_gets_in_is_refused_by_the_csp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were an escape ever missed (here: markup put into the rendered page), the page's
    Content-Security-Policy still keeps it from running: chromium refuses the script and
    the handler, says so, and renders the rest."""
    render = status.render_html

    def injected(doc: dict[str, object]) -> str:
        return render(doc).replace("<body>", "<body>" + HOSTILE, 1)

    monkeypatch.setattr(status, "render_html", injected)
    server = status.serve(status.StatusBoard("wc"), "127.0.0.1", 0, LoopHealth(30))
    try:
        dom = _chromium(f"http://127.0.0.1:{server.server_port}/", tmp_path / "profile")
    finally:
        server.shutdown()
    assert dom.returncode == 0, dom.stderr
    assert "<script>document.title='pwned'</script>" in dom.stdout  # there, and refused:
    assert "<title>processor: wc</title>" in dom.stdout
    refused = [line for line in _console(dom) if CSP_VIOLATION in line]
    assert any("Executing inline script violates" in line for line in refused), dom.stderr
    assert any("inline event handler violates" in line for line in refused), dom.stderr
    assert "Job graph" in dom.stdout and "<th>worker</th>" in dom.stdout
