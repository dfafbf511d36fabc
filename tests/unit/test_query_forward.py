"""Queryable state through the coordinator (issue 27, part 2): a key routed to the URL of
the worker whose task owns it, scans merged, and the forwarding over real HTTP servers."""

from __future__ import annotations

import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor.commands import state
from processor.config import Settings
from processor.coordinator.status import page as status
from processor.http_server import HttpServer, Response
from processor.jobs import load_graph
from processor.query.forward import (
    ForwardRoutes,
    Target,
    WorkerDirectory,
    advertised_url,
    merge_scans,
)
from processor.query.owners import key_tasks, operators, stage_tasks
from processor.query.routes import StateRoutes, json_answer
from tests.unit.test_query_state import PARTITIONS, _serve, _Served

GRAPH = load_graph(Settings(job_name="j", input_topic="in", output_topic="out"))
COUNTS = operators(GRAPH)["counts"]
STATE = {b"counts\0apple": b"3", b"counts\0apricot": b"1", b"counts\0\x005": b"7"}


def _task(word: str) -> str:
    return f"count-{zlib.crc32(word.encode()) % PARTITIONS}"


def test_the_advertised_url() -> None:
    def on(**more: str) -> Settings:
        return Settings(state_api="on", metrics_port=9401, **more)  # type: ignore[arg-type]

    assert advertised_url(on()) == "http://127.0.0.1:9401"
    assert advertised_url(on(metrics_host="0.0.0.0")) == f"http://{socket.gethostname()}:9401"
    assert advertised_url(on(metrics_host="::1")) == "http://[::1]:9401"
    given = on(state_api_url="https://w1.example:443/")
    assert advertised_url(given) == "https://w1.example:443"
    with pytest.raises(ValueError):
        Settings(state_api_url="w1:9401")  # not a URL


def test_a_key_routes_to_its_tasks_workers_url() -> None:
    directory = WorkerDirectory()
    assert key_tasks(COUNTS, "apple", PARTITIONS) == [_task("apple")]
    assert key_tasks(COUNTS, "5", PARTITIONS) == [_task("5")] + (
        [] if _task("\x005") == _task("5") else [_task("\x005")]
    )
    assert "not placed" in str(directory.locate(_task("apple")))
    placement = {t: ("w1" if t < "count-2" else "w2") for t in stage_tasks(COUNTS, 4)}
    directory.placed(placement, ["w1", "w2"])
    assert "has not announced" in str(directory.locate("count-0"))
    assert directory.endpoint("w1", "http://127.0.0.1:9401", alive=True) is None
    assert directory.endpoint("w2", "http://127.0.0.2:9401/", alive=True) is None
    assert directory.locate("count-1") == Target("w1", "http://127.0.0.1:9401")
    assert directory.locate("count-3") == Target("w2", "http://127.0.0.2:9401")
    directory.endpoint("w2", "http://localhost:9402", alive=True)  # restarted: the newest URL
    assert directory.locate("count-2") == Target("w2", "http://localhost:9402")
    directory.placed(placement, ["w1"])  # w2 is gone: its URL with it
    assert "has not announced" in str(directory.locate("count-2"))


def _scan(items: list[dict[str, Any]], tasks: dict[str, Any]) -> Response:
    return json_answer(
        200, {"operator": "counts", "kind": "committed", "tasks": tasks, "items": items}
    )


def test_scans_merge_by_key_up_to_the_limit() -> None:
    one = _scan(
        [{"key": "b", "value": 2, "checkpoint": 4}, {"key": "d", "value": 1, "checkpoint": 4}],
        {"count-0": 4},
    )
    two = _scan(
        [{"key": "a", "value": 5, "checkpoint": 5}, {"key": "b", "value": 3, "checkpoint": 5}],
        {"count-1": 5},
    )
    tasks = ["count-0", "count-1", "count-2", "count-3"]
    down = json_answer(503, {"error": "busy"})
    merged = merge_scans({"w1": one, "w2": two, "w3": down}, tasks, {"count-3": "nowhere"}, 3)
    assert [(i["key"], i["value"]) for i in merged["items"]] == [("a", 5), ("b", 3), ("d", 1)]
    assert merged["tasks"]["count-0"] == 4 and merged["tasks"]["count-1"] == 5
    assert merged["tasks"]["count-2"].startswith("not read")
    assert merged["tasks"]["count-3"] == "nowhere"
    assert merged["workers"] == {
        "w1": {"status": 200},
        "w2": {"status": 200},
        "w3": {"status": 503, "error": "busy"},
    }
    assert [i["key"] for i in merge_scans({"w1": one, "w2": two}, tasks, {}, 1)["items"]] == ["a"]


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[WorkerDirectory, list[HttpServer]]]:
    """Workers w1 (tasks 0, 1) and w2 (tasks 2, 3), each serving its share, behind token t."""
    placement = {f"count-{p}": ("w1" if p < 2 else "w2") for p in range(PARTITIONS)}
    directory = WorkerDirectory()
    directory.placed(placement, ["w1", "w2"])
    served, servers = [], []
    for worker in ("w1", "w2"):
        share = _Served(tmp_path / worker, GRAPH, STATE)
        share.registry.assigned(placement, [t for t, w in placement.items() if w == worker])
        url, server = _serve("t", StateRoutes(share.registry, worker, timeout_s=1))
        directory.endpoint(worker, url, alive=True)
        served.append(share)
        servers.append(server)
    yield directory, servers
    for server in servers:
        server.shutdown()
    for share in served:
        share.close()


def test_the_coordinator_forwards_to_the_owning_worker(
    two_workers: tuple[WorkerDirectory, list[HttpServer]],
) -> None:
    directory, _ = two_workers
    routes = ForwardRoutes(GRAPH, PARTITIONS, directory, timeout_s=1, token="t")
    coordinator = status.serve(None, "127.0.0.1", 0, token="t", state=routes)
    url = f"http://127.0.0.1:{coordinator.server_port}"
    try:
        for word, value in [("apple", 3), ("apricot", 1), ("5", 7)]:
            found = state.get([url], "counts", word, token="t", retry_s=0)
            assert (found.status, found.doc["value"]) == (200, value), found
            assert found.doc["task"] in (key_tasks(COUNTS, word, PARTITIONS) or [])
        assert state.get([url], "counts", "banana", token="t", retry_s=0).status == 404
        assert state.get([url], "counts", "apple", token="", retry_s=0).status == 401
        assert state.get([url], "nope", "apple", token="t", retry_s=0).status == 404
        scanned = state.scan([url], "counts", prefix="ap", limit=10, token="t")[0]
        assert [i["key"] for i in scanned.doc["items"]] == ["apple", "apricot"]
        assert set(scanned.doc["workers"]) == {"w1", "w2"}
        assert state.scan([url], "counts", limit=1, token="t")[0].doc["items"][0]["key"] == "5"
        assert state.scan([url], "counts", limit=1001, token="t")[0].status == 400
        # The placement moved on, the old worker has not heard yet: its 421 is passed on.
        apple = _task("apple")
        directory.placed(
            {
                **{t: "w1" for t in stage_tasks(COUNTS, 4)},
                apple: "w2" if apple < "count-2" else "w1",
            },
            ["w1", "w2"],
        )
        assert state.get([url], "counts", "apple", token="t", retry_s=0).status == 421
        # A worker that is away: 503, try again.
        directory.endpoint("w1", "http://127.0.0.1:1", alive=True)
        directory.endpoint("w2", "http://127.0.0.1:1", alive=True)
        away = state.request(state.key_url(url, "counts", "apple"), "t")
        assert away.status == 503 and "no answer" in away.doc["error"]
        directory.placed({}, ["w1", "w2"])
        assert (
            "not placed" in state.request(state.key_url(url, "counts", "apple"), "t").doc["error"]
        )
    finally:
        coordinator.shutdown()


def test_off_the_coordinator_has_no_state_routes() -> None:
    coordinator = status.serve(None, "127.0.0.1", 0)
    try:
        answer = state.request(f"http://127.0.0.1:{coordinator.server_port}/state/counts/a")
        assert answer.status == 404
    finally:
        coordinator.shutdown()


@pytest.mark.parametrize("api", ["on", "off"])
def test_a_worker_announces_its_url_at_start_and_every_tenth_heartbeat(
    tmp_path: Path, api: str
) -> None:
    from processor.models import control
    from processor.worker.service import ENDPOINT_EVERY, Worker

    settings = Settings(
        bootstrap_servers="127.0.0.1:1",  # never reached: the clients connect lazily
        state_dir=tmp_path / "state",
        worker_id="w1",
        state_api=api,  # type: ignore[arg-type]
        metrics_port=9401,
    )
    worker = Worker(settings)
    sent: list[control.Message] = []
    worker.send = sent.append  # type: ignore[method-assign,assignment]
    try:
        for _ in range(ENDPOINT_EVERY + 1):
            worker._heartbeat()
    finally:
        worker._control.close()
    endpoints = [m for m in sent if isinstance(m, control.Endpoint)]
    expected = [control.Endpoint("w1", "http://127.0.0.1:9401")] * 2 if api == "on" else []
    assert endpoints == expected
    assert sum(isinstance(m, control.Heartbeat) for m in sent) == ENDPOINT_EVERY + 1
