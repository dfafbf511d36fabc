"""A forged ``endpoint`` control record (issue 41, item 2): the coordinator forwards state
requests only to a live worker at an allowed address, never with the caller's credential,
and answers only JSON of bounded size, whatever the server at that address says."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from processor import endpoints
from processor.config import Settings
from processor.coordinator.status import page as status
from processor.http_server import HttpServer, Request, Response
from processor.jobs import load_graph
from processor.jobs.assignment import WorkerRegistry
from processor.models import control
from processor.query.forward import MAX_ANSWER_BYTES, ForwardRoutes, WorkerDirectory
from processor.query.owners import operators, stage_tasks
from processor.worker_hosts import WorkerHosts, url_problem

GRAPH = load_graph(Settings(job_name="j", input_topic="in", output_topic="out"))
COUNTS = operators(GRAPH)["counts"]
PARTITIONS = 4
TOKEN = "caller-secret-token"


@dataclass
class Attacker:
    """A server of the test's own on loopback: records every request, answers as told."""

    url: str = ""
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/html"
    body: bytes = b'"<script>steal()</script>"'  # JSON, served as a page


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    told = Attacker()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            told.seen.append((self.path, dict(self.headers.items())))
            self.send_response(told.status)
            self.send_header("Content-Type", told.content_type)
            self.send_header("Content-Length", str(len(told.body)))
            self.end_headers()
            self.wfile.write(told.body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    told.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield told
    server.shutdown()
    server.server_close()


@pytest.fixture
def coordinator() -> Iterator[tuple[str, WorkerDirectory, WorkerRegistry]]:
    """A coordinator's state routes (token TOKEN), worker w1 alive and holding every task."""
    directory = WorkerDirectory()
    registry = WorkerRegistry(timeout_s=60)
    registry.heartbeat("w1", "inc-1", time.monotonic())
    directory.placed({t: "w1" for t in stage_tasks(COUNTS, PARTITIONS)}, registry.alive)
    routes = ForwardRoutes(GRAPH, PARTITIONS, directory, timeout_s=1, token=TOKEN)
    server = status.serve(None, "127.0.0.1", 0, token=TOKEN, state=routes)
    yield f"http://127.0.0.1:{server.server_port}", directory, registry
    server.shutdown()


def _announce(directory: WorkerDirectory, registry: WorkerRegistry, raw: bytes) -> str | None:
    """What the coordinator's loop does with a control record of kind endpoint."""
    message = control.decode(raw)
    assert isinstance(message, control.Endpoint)
    return directory.endpoint(message.worker, message.url, registry.is_alive(message.worker))


def _ask(base: str, query: str = "", headers: bool = False) -> tuple[int, str, bytes]:
    """The coordinator's status, type and body (``headers``: its header block instead)."""
    request = urllib.request.Request(
        f"{base}/state/counts/apple{query}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = str(answer.headers).encode() if headers else answer.read()
            return answer.status, answer.headers["Content-Type"], body
    except urllib.error.HTTPError as exc:
        body = str(exc.headers).encode() if headers else exc.read()
        return exc.code, exc.headers["Content-Type"], body


def test_a_forged_endpoint_of_a_worker_not_alive_is_never_asked(
    attacker: Attacker, coordinator: tuple[str, WorkerDirectory, WorkerRegistry]
) -> None:
    base, directory, registry = coordinator
    forged = b'{"kind":"endpoint","worker":"w1-ghost","url":"%s"}' % attacker.url.encode()
    assert "not alive" in str(_announce(directory, registry, forged))
    # Placed on the ghost (as a heartbeat adopting a task would): still never asked.
    directory.placed({t: "w1-ghost" for t in stage_tasks(COUNTS, PARTITIONS)}, registry.alive)
    status_code, content_type, body = _ask(base)
    assert (status_code, content_type) == (503, "application/json")
    assert b"has not announced" in body
    assert attacker.seen == []


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.example:80",  # not an allowed host
        "http://10.1.2.3:9401",
        "http://user:pass@127.0.0.1:1",  # credentials in it
        "http://127.0.0.1:1/?x=1",  # a query
        "ftp://127.0.0.1:1",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:1/\r\nX: y",
    ],
)
def test_a_url_of_a_live_worker_outside_the_allowed_hosts_is_refused(
    url: str, attacker: Attacker, coordinator: tuple[str, WorkerDirectory, WorkerRegistry]
) -> None:
    base, directory, registry = coordinator
    assert directory.endpoint("w1", url, registry.is_alive("w1")) is not None
    assert _ask(base)[0] == 503
    assert attacker.seen == []


def test_a_forged_loopback_endpoint_of_a_live_worker_gets_no_credential_and_no_page(
    attacker: Attacker, coordinator: tuple[str, WorkerDirectory, WorkerRegistry]
) -> None:
    base, directory, registry = coordinator
    forged = b'{"kind":"endpoint","worker":"w1","url":"%s"}' % attacker.url.encode()
    assert _announce(directory, registry, forged) is None  # loopback is allowed by default
    status_code, content_type, body = _ask(base, f"?token={TOKEN}&fresh=true")
    assert (status_code, content_type) == (502, "application/json")
    assert b"<script>" not in body and b"'text/html', not JSON" in body
    [(path, sent)] = attacker.seen
    assert TOKEN not in path and "fresh=true" in path
    assert TOKEN not in repr(sent)
    assert "Authorization" not in sent
    # A status no worker answers, an answer too large, one that is not JSON.
    cases: list[tuple[dict[str, object], bytes]] = [
        (dict(status=302, content_type="application/json"), b"{}"),
        (dict(content_type="application/json"), b'"' + b"a" * MAX_ANSWER_BYTES + b'"'),
        (dict(content_type="application/json"), b"{not json"),
    ]
    for told, body_sent in cases:
        attacker.status, attacker.content_type, attacker.body = 200, "application/json", body_sent
        for name, value in told.items():
            setattr(attacker, name, value)
        status_code, content_type, body = _ask(base)
        assert (status_code, content_type) == (502, "application/json"), (told, body[:200])
    # A header line smuggled after the type: the coordinator copies no header of theirs.
    attacker.status, attacker.body = 200, b"{}"
    attacker.content_type = "application/json\r\nX-Evil: 1"
    status_code, content_type, head = _ask(base, headers=True)
    assert (status_code, content_type) == (200, "application/json")
    assert b"X-Evil" not in head


def test_the_coordinators_signature_is_good_for_its_request_and_a_moment_only() -> None:
    def page(request: Request) -> Response:
        return Response(200, "application/json", b"{}\n")

    server: HttpServer = endpoints.serve("127.0.0.1", 0, token="t", pages=page)
    base = f"http://127.0.0.1:{server.server_port}"

    def asked(path: str, query: dict[str, list[str]], at: int, url: str) -> int:
        header = endpoints.signature(b"t", path, query, at)
        request = urllib.request.Request(base + url, headers={"X-Processor-Signature": header})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    now = int(time.time())
    try:
        fresh = {"fresh": ["true"]}
        assert asked("/state/counts/a b", fresh, now, "/state/counts/a%20b?fresh=true") == 200
        assert asked("/state/counts/a", {}, now, "/state/counts/a") == 200
        assert asked("/state/counts/a", {}, now, "/state/counts/b") == 401  # another path
        assert asked("/state/counts/a", {}, now, "/state/counts/a?fresh=true") == 401
        assert asked("/state/counts/a", {}, now - 120, "/state/counts/a") == 401  # too old
    finally:
        server.shutdown()
    at, _, mac = endpoints.signature(b"t", "/x", {"token": ["t"]}, now).partition(":")
    assert at == str(now) and len(mac) == 64  # an HMAC, not the token


def test_the_allowed_hosts() -> None:
    hosts = WorkerHosts.parse("10.0.0.0/8, .workers.svc.cluster.local, w1")
    assert hosts.allows("10.1.2.3") and hosts.allows("a.workers.svc.cluster.local")
    assert hosts.allows("W1") and not hosts.allows("w2") and not hosts.allows("127.0.0.1")
    assert not hosts.allows("evilworkers.svc.cluster.local")
    loopback = WorkerHosts.parse(Settings().state_api_workers)
    assert url_problem("http://127.0.0.1:9401", loopback) is None
    assert url_problem("http://[::1]:9401/base", loopback) is None
    assert url_problem("http://localhost:9401", loopback) is None
    with pytest.raises(ValueError):
        Settings(state_api_workers="a b")
