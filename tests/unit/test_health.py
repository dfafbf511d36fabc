"""/healthz reflects the main loop, not the HTTP thread; a worker's metrics carry its id."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from processor import metrics
from processor.coordinator.status import page as status
from processor.health import LoopHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_loop_health_is_ok_within_the_bound_and_stuck_past_it() -> None:
    clock = Clock()
    health = LoopHealth(30, clock)
    clock.now += 29
    assert health.check()[0]  # starting counts as a beat
    clock.now += 2
    ok, line = health.check()
    assert not ok
    assert "31.0 s ago" in line
    health.beat()
    assert health.check() == (True, "ok: main loop went round 0.0 s ago\n")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker_endpoint(clock: Clock) -> Iterator[tuple[str, LoopHealth]]:
    health = LoopHealth(30, clock)
    server = status.serve(None, "127.0.0.1", 0, health, {"worker": "w-test-7"})
    try:
        yield f"http://127.0.0.1:{server.server_port}", health
    finally:
        server.shutdown()
        server.server_close()


def test_healthz_fails_while_metrics_still_answer(
    worker_endpoint: tuple[str, LoopHealth], clock: Clock
) -> None:
    url, health = worker_endpoint
    assert _get(f"{url}/healthz")[0] == 200
    clock.now += 31  # the main loop stopped going round
    code, body = _get(f"{url}/healthz")
    assert code == 503
    assert body.startswith("stuck:")
    assert _get(f"{url}/metrics")[0] == 200
    health.beat()
    assert _get(f"{url}/healthz")[0] == 200


def test_worker_metrics_carry_the_worker_id(worker_endpoint: tuple[str, LoopHealth]) -> None:
    url, _ = worker_endpoint
    metrics.records_in.labels(job_name="health-test", task="split-0").inc(2)
    code, body = _get(f"{url}/metrics")
    assert code == 200
    assert (
        'processor_records_in_total{job_name="health-test",task="split-0",'
        'worker="w-test-7"} 2.0' in body
    )
    samples = [line for line in body.splitlines() if line and not line.startswith("#")]
    assert samples
    assert all('worker="w-test-7"' in line for line in samples)


def test_a_worker_serves_no_status_page(worker_endpoint: tuple[str, LoopHealth]) -> None:
    url, _ = worker_endpoint
    assert _get(f"{url}/")[0] == 404
    assert _get(f"{url}/api/status")[0] == 404


def test_metrics_serve_reports_a_taken_port() -> None:
    server = status.serve(None, "127.0.0.1", 0)
    try:
        with pytest.raises(Exception, match="PROCESSOR_METRICS_PORT"):
            metrics.serve(server.server_port, "127.0.0.1")
    finally:
        server.shutdown()
        server.server_close()
