"""The services' HTTP side under abuse (issue 25, item 3): a thousand idle connections, a
DNS-rebinding Host, no token, bad requests. The old server held a thread per connection
without a timeout: 1,000 connections that never sent a request held 1,000 threads in the
process that runs the task threads, and a page elsewhere could read 127.0.0.1:9400."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor import http_server
from processor.coordinator.status.page import StatusBoard, serve
from processor.health import LoopHealth
from processor.http_server import HttpServer, Request, parse_head

TOKEN = "s3cret-token"


@pytest.fixture
def coordinator_port() -> Iterator[int]:
    server = serve(StatusBoard("job-x"), "127.0.0.1", 0, LoopHealth(30), token=TOKEN)
    try:
        yield server.server_port
    finally:
        server.shutdown()


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_a_thousand_idle_connections_leave_healthz_answering(coordinator_port: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    threads_before = threading.active_count()
    idle: list[socket.socket] = []
    try:
        for i in range(1000):
            conn = socket.create_connection(("127.0.0.1", coordinator_port), timeout=10)
            if i % 2:
                conn.sendall(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends
            idle.append(conn)
        # No thread per connection: the server's one loop thread holds them all.
        assert threading.active_count() - threads_before <= 2
        started = time.monotonic()
        status, body = _get(coordinator_port, "/healthz")
        assert status == 200 and body.startswith(b"ok")
        assert time.monotonic() - started < 5
    finally:
        for conn in idle:
            conn.close()


def test_a_connection_that_sends_no_head_in_time_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT_S", 0.3)
    server = serve(None, "127.0.0.1", 0, LoopHealth(30))
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\n")
            assert conn.recv(100) == b""  # closed by the server, not by the 5 s timeout
    finally:
        server.shutdown()


def test_a_rebinding_host_is_refused_on_loopback(coordinator_port: int) -> None:
    assert _get(coordinator_port, "/healthz", {"Host": "evil.example:9400"})[0] == 421
    assert _get(coordinator_port, "/metrics", {"Host": "attacker.test"})[0] == 421
    for host in ("127.0.0.1", f"127.0.0.1:{coordinator_port}", "localhost:1", "[::1]:9400"):
        assert _get(coordinator_port, "/healthz", {"Host": host})[0] == 200, host


def test_no_host_check_when_served_for_the_network() -> None:
    server = serve(None, "0.0.0.0", 0, LoopHealth(30))
    try:
        assert _get(server.server_port, "/healthz", {"Host": "worker-3.processor:9400"})[0] == 200
    finally:
        server.shutdown()


def test_the_token_guards_everything_but_metrics_and_healthz(coordinator_port: int) -> None:
    assert _get(coordinator_port, "/api/status")[0] == 401
    assert _get(coordinator_port, "/", {"Authorization": "Bearer wrong"})[0] == 401
    assert _get(coordinator_port, "/api/status?token=wrong")[0] == 401
    status, body = _get(coordinator_port, "/api/status", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and json.loads(body)["job"] == "job-x"
    assert _get(coordinator_port, f"/?token={TOKEN}")[0] == 200
    assert _get(coordinator_port, "/metrics")[0] == 200
    assert _get(coordinator_port, "/healthz")[0] == 200


def test_without_a_token_the_status_is_open() -> None:
    server = serve(StatusBoard("j"), "127.0.0.1", 0, LoopHealth(30))
    try:
        assert _get(server.server_port, "/api/status")[0] == 200
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405),
        (b"garbage\r\n\r\n", 400),
        (b"GET / HTTP/2\r\n\r\n", 505),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", 431),
        (b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404),
        (b"GET http://[x/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),  # issue 41
    ],
)
def test_bad_requests_get_an_answer_not_a_traceback(raw: bytes, status: int) -> None:
    server = serve(None, "127.0.0.1", 0, LoopHealth(30))
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as conn:
            conn.sendall(raw)
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:80]
    finally:
        server.shutdown()


def test_a_failing_handler_answers_500_and_the_server_goes_on() -> None:
    calls = []

    def handler(request: Request) -> http_server.Response:
        calls.append(request.path)
        if request.path == "/boom":
            raise RuntimeError("boom")
        return http_server.Response(200, "text/plain", b"fine\n")

    server = HttpServer("127.0.0.1", 0, handler)
    try:
        assert _get(server.server_port, "/boom")[0] == 500
        assert _get(server.server_port, "/ok") == (200, b"fine\n")
    finally:
        server.shutdown()
    assert calls == ["/boom", "/ok"]


def test_parse_head() -> None:
    request = parse_head(b"GET /a%20b?token=x&y=1 HTTP/1.1\r\nHost: h:1\r\nX-Y:  z ")
    assert request == Request(
        "GET", "/a b", {"token": ["x"], "y": ["1"]}, {"host": "h:1", "x-y": "z"}
    )


def test_slow_state_reads_run_off_the_loop_and_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A state read waiting on its task's gate must not hold up /healthz (a probe that times
    out restarts the worker); past `MAX_SLOW_PENDING` reads in flight, more are 503 at once."""
    from processor.endpoints import serve as serve_endpoints

    monkeypatch.setattr(http_server, "MAX_SLOW_PENDING", 2)
    release = threading.Event()

    def pages(request: Request) -> http_server.Response | None:
        release.wait(10)
        return http_server.Response(200, "text/plain", b"value\n")

    server = serve_endpoints("127.0.0.1", 0, LoopHealth(30), pages=pages, slow=("/state/",))
    port = server.server_port
    answers: list[int] = []
    readers = [
        threading.Thread(target=lambda: answers.append(_get(port, "/state/counts/a")[0]))
        for _ in range(2)
    ]
    try:
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 5
        while server._slow_pending < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _get(port, "/healthz")[0] == 200  # answered while both reads wait
        status, _ = _get(port, "/state/counts/b")
        assert status == 503
        release.set()
        for reader in readers:
            reader.join(10)
        assert answers == [200, 200]
    finally:
        release.set()
        server.shutdown()


def _head(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def test_every_answer_is_not_cached_sniffed_or_framed(coordinator_port: int) -> None:
    """Issue 41, item 6: Content-Security-Policy, nosniff, frame-ancestors, no-store."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path, headers in [
        ("/metrics", {}),
        ("/healthz", {}),
        ("/api/status", {}),  # 401
        ("/api/status", auth),
        ("/nothing", auth),
        ("/", auth),
    ]:
        _, got, _ = _head(coordinator_port, path, headers)
        assert got["X-Content-Type-Options"] == "nosniff", path
        assert got["Cache-Control"] == "no-store", path
        assert "frame-ancestors 'none'" in got["Content-Security-Policy"], path
        assert "default-src 'none'" in got["Content-Security-Policy"], path
    # The status page's own inline style and script, and only those, by their hashes.
    status, got, page = _head(coordinator_port, "/", auth)
    policy = got["Content-Security-Policy"]
    for tag in ("style", "script"):
        inline = page.decode().split(f"<{tag}>")[1].split(f"</{tag}>")[0]
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy, tag
    assert status == 200 and policy.count("sha256-") == 2 and "unsafe" not in policy


@pytest.mark.parametrize("hosts", [frozenset(), frozenset({"status.example"})])
def test_without_a_token_pages_answer_only_to_allowed_hosts_on_the_network(
    hosts: frozenset[str],
) -> None:
    """Issue 41, item 6: the image, compose and Kubernetes bind 0.0.0.0 with no token."""
    server = serve(StatusBoard("j"), "0.0.0.0", 0, LoopHealth(30), hosts=hosts)
    try:
        port = server.server_port
        assert _get(port, "/api/status", {"Host": "evil.example:9400"})[0] == 421
        assert _get(port, "/", {"Host": "evil.example"})[0] == 421
        for open_path in ("/metrics", "/healthz"):  # Prometheus, probes: by any name
            assert _get(port, open_path, {"Host": "evil.example"})[0] == 200
        for host in ["10.1.2.3:9400", "[fd00::7]:9400", "localhost:9400", *hosts]:
            assert _get(port, "/api/status", {"Host": host})[0] == 200, host
    finally:
        server.shutdown()
    with_token = serve(StatusBoard("j"), "0.0.0.0", 0, LoopHealth(30), token=TOKEN)
    try:
        headers = {"Host": "evil.example", "Authorization": f"Bearer {TOKEN}"}
        assert _get(with_token.server_port, "/api/status", headers)[0] == 200
    finally:
        with_token.shutdown()


def test_the_allowed_names_setting() -> None:
    from processor.config import Settings

    given = Settings(http_hosts="Status.Example, coord", state_api_url="http://W-1.svc:9401")
    names = given.http_host_names
    assert {"status.example", "coord", "localhost", socket.gethostname().lower()} <= names
    assert "w-1.svc" in names  # the name the coordinator reaches a worker by
    with pytest.raises(ValueError):
        Settings(http_hosts="a/b")


def test_a_key_of_4000_hex_digits_is_a_4xx_not_a_500(tmp_path: Path) -> None:
    """Issue 41, Low: ``0x`` and 4,000 ``f``s is an int too long to show as text."""
    from tests.unit.test_query_forward import GRAPH, STATE
    from tests.unit.test_query_state import _Served

    served = _Served(tmp_path, GRAPH, STATE)
    try:
        assert served.get("/state/counts/0x" + "f" * 4000).status == 404
    finally:
        served.close()
