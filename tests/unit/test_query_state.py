"""Queryable state's pure parts and its gate (issue 27): keys as a sink shows them, the task
that owns one, committed views against the live store, and the routes' answers."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor import endpoints
from processor.api.streams import Pipeline
from processor.config import Settings
from processor.engine.chain import StageChain
from processor.engine.live_state import epoch_value
from processor.http_server import HttpServer, Request, Response
from processor.jobs import load_graph
from processor.jobs.graph import JobGraph
from processor.models.murmur2 import partition_of
from processor.plan.stages import plan
from processor.query.owners import (
    QueryRegistry,
    key_candidates,
    operators,
    owner,
    partitions_of,
    split_window,
    stage_sizes,
)
from processor.query.routes import StateRoutes
from processor.state.query_gate import NotServing, TaskGate, link_view
from processor.state.rocksdb.store import RocksDBStore

PARTITIONS = 4
APPLE = b"counts\0apple"


def test_a_key_is_tried_as_a_sink_shows_it() -> None:
    assert key_candidates("apple") == ["apple"]
    assert key_candidates("5") == ["5", "\x005"]  # the string, then the int
    assert key_candidates("[1, 2]") == ["[1, 2]", "\x00[1,2]"]
    assert key_candidates("True") == ["True", "\x00true"]
    assert key_candidates("'a'") == ["'a'"]  # a sink shows the key 'a' as a
    assert key_candidates("5.0") == ["5.0", "\x005.0"]


def test_a_windowed_key_is_key_at_start() -> None:
    assert split_window("apple@60000") == ("apple", 60000)
    assert split_window("a@b@-5") == ("a@b", -5)
    assert split_window("apple") is None
    assert split_window("apple@x") is None


def test_the_owner_is_the_shuffles_partition() -> None:
    graph = load_graph(Settings(job_name="j", input_topic="in", output_topic="out"))
    counts = operators(graph)["counts"]
    for word in ["apple", "pear", "fig", "x" * 100]:
        assert owner(counts, word, PARTITIONS) == f"count-{zlib.crc32(word.encode()) % PARTITIONS}"


def test_a_keyed_sources_owner_is_its_partitioners_choice() -> None:
    p = Pipeline()
    p.keyed_source("clicks", key="text").count(name="per_user").sink("out")
    p.keyed_source("views", key="json", partitioner="crc32").count(name="per_view").sink("o2")
    found = operators(JobGraph("j", plan(p)))
    assert "per_view" not in found  # JSON keys: the producers' bytes are not known
    clicks = found["per_user"]
    for user in ["ann", "bob", "x" * 100]:
        assert owner(clicks, user, 3) == f"clicks-{partition_of(user.encode(), 3)}"
    assert stage_sizes(["clicks-0", "clicks-1", "clicks-2", "count-0"]) == {"clicks": 3, "count": 1}
    assert partitions_of(clicks, 8, {"clicks": 3}) == 3  # its topic's, not the shuffles'


def _store_with(path: Path, items: dict[bytes, bytes]) -> RocksDBStore:
    store = RocksDBStore(path)
    store.write(dict(items))
    return store


def test_committed_reads_come_from_the_committed_view_not_the_live_store(
    tmp_path: Path,
) -> None:
    store = _store_with(tmp_path / "db", {b"counts\0a": b"1", b"counts\0b": b"2"})
    gate = TaskGate("count-0")
    with pytest.raises(NotServing, match="restoring"):
        gate.get([b"counts\0a"], 1)
    store.checkpoint(tmp_path / "chk-1")
    view = link_view(tmp_path / "chk-1", tmp_path / "query-1")
    # Epoch 2 runs ahead, and checkpoint 2's state is flushed before its commit.
    store.write({b"counts\0a": b"5", b"counts\0c": b"1", b"counts\0b": None})
    gate.committed(1, view, store)
    committed = gate.get([b"counts\0a", b"counts\0b", b"counts\0c"], 1)
    assert (committed.checkpoint, committed.values) == (1, [b"1", b"2", None])
    fresh = gate.get([b"counts\0a", b"counts\0b", b"counts\0c"], 1, fresh=True)
    assert (fresh.fresh, fresh.values) == (True, [b"5", None, b"1"])
    scan = gate.scan(b"counts\0", b"counts\0", 10, 1)
    assert scan.items == [(b"counts\0a", b"1"), (b"counts\0b", b"2")]
    assert gate.scan(b"counts\0", b"counts\0", 1, 1).items == [(b"counts\0a", b"1")]
    # Checkpoint 2 commits: its view replaces (and removes) the first.
    store.checkpoint(tmp_path / "chk-2")
    gate.committed(2, link_view(tmp_path / "chk-2", tmp_path / "query-2"), store)
    assert not view.exists()
    assert gate.get([b"counts\0a"], 1).values == [b"5"]
    gate.close()
    with pytest.raises(NotServing, match="closed"):
        gate.get([b"counts\0a"], 1)
    assert not (tmp_path / "query-2").exists()
    store.close()


def test_a_task_without_a_checkpoint_has_no_committed_value(tmp_path: Path) -> None:
    store = _store_with(tmp_path / "db", {b"counts\0a": b"1"})
    gate = TaskGate("count-0")
    gate.committed(0, None, store)
    assert gate.get([b"counts\0a"], 1).values == [None]
    assert gate.scan(b"counts\0", b"counts\0", 10, 1).items == []
    store.close()


def test_a_busy_gate_answers_not_serving_after_the_timeout(tmp_path: Path) -> None:
    store = _store_with(tmp_path / "db", {})
    gate = TaskGate("count-0")
    gate.committed(0, None, store)
    # The lock held: a long read, or the task handing over a view.
    with gate._lock, pytest.raises(NotServing, match="busy"):
        gate.get([b"counts\0a"], 0.05)
    store.close()


class _Served:
    """A registry over one real store per task, all on this worker, checkpoint 3."""

    def __init__(self, tmp_path: Path, graph: JobGraph, state: dict[bytes, bytes]) -> None:
        self.registry = QueryRegistry(graph, PARTITIONS)
        self.stores = []
        stage = next(s for s in graph.stages if not s.is_source)
        tasks = {f"{stage.name}-{p}": "w1" for p in range(PARTITIONS)}
        for p in range(PARTITIONS):
            mine = {k: v for k, v in state.items() if _partition(k) == p}
            store = _store_with(tmp_path / f"db-{p}", mine)
            store.checkpoint(tmp_path / f"view-{p}")
            gate = self.registry.gate(f"{stage.name}-{p}")
            gate.committed(3, tmp_path / f"view-{p}", store)
            self.stores.append(store)
        self.registry.assigned(tasks, tasks)
        self.routes = StateRoutes(self.registry, "w1", timeout_s=1)

    def get(self, path: str, **query: str) -> Response:
        answer = self.routes(Request("GET", path, {k: [v] for k, v in query.items()}, {}))
        assert answer is not None
        return answer

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _partition(key: bytes) -> int:
    return zlib.crc32(key.partition(b"\0")[2]) % PARTITIONS


def _doc(answer: Response) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(answer.body)
    return doc


@pytest.fixture
def wordcount(tmp_path: Path) -> Iterator[_Served]:
    graph = load_graph(Settings(job_name="j", input_topic="in", output_topic="out"))
    state = {b"counts\0apple": b"3", b"counts\0apricot": b"1", b"counts\0\x005": b"7"}
    served = _Served(tmp_path, graph, state)
    yield served
    served.close()


def test_get_answers_the_committed_value_with_its_checkpoint_and_task(
    wordcount: _Served,
) -> None:
    answer = wordcount.get("/state/counts/apple")
    assert answer.status == 200
    task = f"count-{_partition(APPLE)}"
    assert _doc(answer) == {
        "key": "apple",
        "operator": "counts",
        "value": 3,
        "checkpoint": 3,
        "task": task,
        "kind": "committed",
    }
    assert _doc(wordcount.get("/state/counts/5"))["value"] == 7  # the int key 5
    missing = wordcount.get("/state/counts/banana")
    assert missing.status == 404 and _doc(missing)["checkpoint"] == 3
    unknown = wordcount.get("/state/nope/apple")
    assert unknown.status == 404 and "counts" in _doc(unknown)["operators"]
    assert wordcount.routes(Request("GET", "/metrics", {}, {})) is None


def test_scan_is_bounded_and_prefixed(wordcount: _Served) -> None:
    answer = wordcount.get("/state/counts", prefix="ap")
    items = _doc(answer)["items"]
    assert sorted((i["key"], i["value"]) for i in items) == [("apple", 3), ("apricot", 1)]
    everything = _doc(wordcount.get("/state/counts"))["items"]
    assert len(everything) == 3
    assert len(_doc(wordcount.get("/state/counts", limit="1"))["items"]) == 1
    for bad in ("1001", "0", "x"):
        assert wordcount.get("/state/counts", limit=bad).status == 400


def test_503_while_restoring_and_421_elsewhere(wordcount: _Served) -> None:
    task = f"count-{_partition(APPLE)}"
    gate = wordcount.registry.find(task)
    assert isinstance(gate, TaskGate)
    gate.restoring()
    answer = wordcount.get("/state/counts/apple")
    assert answer.status == 503 and ("Retry-After", "1") in answer.headers
    scan = _doc(wordcount.get("/state/counts"))
    assert "restoring" in str(scan["tasks"][task])
    wordcount.registry.assigned({task: "w2"}, [])  # the task moved to w2
    moved = wordcount.get("/state/counts/apple")
    assert moved.status == 421 and _doc(moved)["worker"] == "w2"
    wordcount.registry.assigned({task: "w1"}, [task])  # back, not started yet
    assert wordcount.get("/state/counts/apple").status == 503


def test_a_window_is_read_by_key_at_start(tmp_path: Path) -> None:
    p = Pipeline()
    keyed = p.source("in", value="json", timestamp=lambda v: v["ts"]).key_by(lambda v: v["k"])
    keyed.window(size_ms=1000).count(name="per_second").sink("out")
    graph = JobGraph("j", plan(p))
    state = {b"per_second\0a": json.dumps({"0": 2, "1000": 5}).encode()}
    served = _Served(tmp_path, graph, state)
    try:
        answer = served.get("/state/per_second/a@1000")
        assert (answer.status, _doc(answer)["value"], _doc(answer)["window"]) == (200, 5, 1000)
        assert served.get("/state/per_second/a@2000").status == 404
        assert served.get("/state/per_second/a").status == 400
    finally:
        served.close()


def _serve(token: str, pages: StateRoutes | None) -> tuple[str, HttpServer]:
    server = endpoints.serve("127.0.0.1", 0, token=token, pages=pages)
    return f"http://127.0.0.1:{server.server_port}", server


def _status(url: str, token: str = "") -> int:
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_off_by_default_and_behind_the_token(wordcount: _Served) -> None:
    assert Settings().state_api == "off"
    url, server = _serve("", None)  # PROCESSOR_STATE_API=off: no /state routes
    try:
        assert _status(f"{url}/state/counts/apple") == 404
    finally:
        server.shutdown()
    url, server = _serve("s3cret", wordcount.routes)
    try:
        assert _status(f"{url}/state/counts/apple") == 401
        assert _status(f"{url}/state/counts/apple", "wrong") == 401
        assert _status(f"{url}/state/counts/apple", "s3cret") == 200
        assert _status(f"{url}/metrics") == 200  # scrapes never need it
    finally:
        server.shutdown()


def test_reads_and_hand_overs_from_two_threads(tmp_path: Path) -> None:
    """The task thread hands over views while a request thread reads: every read sees one
    committed checkpoint's value, never a mix and never an error."""
    store = _store_with(tmp_path / "db", {b"counts\0a": b"0"})
    gate = TaskGate("count-0")
    gate.committed(0, None, store)
    seen: list[tuple[int, list[bytes | None]]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            r = gate.get([b"counts\0a"], 1)
            seen.append((r.checkpoint, r.values))

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(1, 30):
        store.write({b"counts\0a": b"%d" % n})
        store.checkpoint(tmp_path / f"chk-{n}")
        view = link_view(tmp_path / f"chk-{n}", tmp_path / f"query-{n}")
        store.write({b"counts\0a": b"%d" % (n + 1000)})  # the next epoch, uncommitted
        gate.committed(n, view, store)
    done.set()
    reader.join()
    gate.close()
    store.close()
    assert all(values == ([None] if n == 0 else [b"%d" % n]) for n, values in seen)


def test_fresh_reads_see_the_epoch_in_memory_committed_ones_do_not(tmp_path: Path) -> None:
    p = Pipeline()
    p.source("w").key_by(lambda w: w).count(name="counts").sink("c")
    compiled = plan(p)
    stage = compiled.stages[1]
    store = RocksDBStore(tmp_path / "db")
    chain = StageChain(compiled, stage, 0, store, {stage.name: 1})
    chain.shuffled({"a": 2})
    chain.flush()
    store.checkpoint(tmp_path / "chk-1")
    gate = TaskGate("w.key_by-0")
    view = link_view(tmp_path / "chk-1", tmp_path / "query-1")
    gate.committed(1, view, store, lambda key: epoch_value(chain, key))
    chain.shuffled({"a": 3, "b": 1})  # epoch 2, in memory only
    keys = [b"counts\0a", b"counts\0b", b"counts\0c"]
    assert epoch_value(chain, b"counts\0a") == (True, b"5")
    assert epoch_value(chain, b"counts\0c") == (False, None)
    assert gate.get(keys, 1, fresh=True).values == [b"5", b"1", None]
    assert gate.get(keys, 1).values == [b"2", None, None]
    chain.flush()  # in RocksDB now, still not committed
    assert gate.get(keys, 1, fresh=True).values == [b"5", b"1", None]
    assert gate.get(keys, 1).values == [b"2", None, None]
    gate.close()
    store.close()


def test_the_command_asks_every_worker_until_one_owns_the_key(wordcount: _Served) -> None:
    from processor.commands import state

    assert state.key_url("http://w:1/", "counts", "a b/c") == "http://w:1/state/counts/a%20b%2Fc"
    elsewhere = QueryRegistry(load_graph(Settings()), PARTITIONS)
    others = {f"count-{p}": "w1" for p in range(PARTITIONS)}
    elsewhere.assigned(others, [])  # a worker with none of the tasks: 421 for every key
    url_elsewhere, server_elsewhere = _serve("", StateRoutes(elsewhere, "w2", 1))
    url, server = _serve("t", wordcount.routes)
    try:
        found = state.get([url_elsewhere, url], "counts", "apple", token="t")
        assert (found.status, found.doc["value"]) == (200, 3)
        missing = state.get([url_elsewhere, url], "counts", "banana", token="t")
        assert missing.status == 404
        nowhere = state.get([url_elsewhere, "http://127.0.0.1:1"], "counts", "apple", retry_s=0)
        assert nowhere.status == 421 and nowhere.doc["worker"] == "w1"
        answers = state.scan([url], "counts", prefix="ap", token="t")
        assert sorted(i["key"] for i in answers[0].doc["items"]) == ["apple", "apricot"]
    finally:
        server.shutdown()
        server_elsewhere.shutdown()


def test_requests_are_counted_by_route_and_status(wordcount: _Served) -> None:
    from prometheus_client import REGISTRY

    def count(route: str, status: str) -> float:
        labels = {"job_name": "", "route": route, "status": status}
        return REGISTRY.get_sample_value("processor_state_requests_total", labels) or 0.0

    before = count("get", "200"), count("get", "404"), count("scan", "400")
    wordcount.get("/state/counts/apple")
    wordcount.get("/state/counts/banana")
    wordcount.get("/state/counts", limit="5000")
    assert (count("get", "200"), count("get", "404"), count("scan", "400")) == tuple(
        b + 1 for b in before
    )
