"""A small HTTP/1.1 server for the services' endpoints that idle connections cannot exhaust.

The standard library's threading server started a thread per connection, without limit and
without a timeout, in the process that runs the task threads: a thousand connections that
never send a request held a thousand threads (issue 25). Here one asyncio loop, in one daemon
thread, holds every connection:

- a request's head must arrive within ``HEAD_TIMEOUT_S`` and fit in ``MAX_HEAD_BYTES``;
- at most ``MAX_CONNECTIONS`` are open: a new one closes the oldest that has not sent its
  head yet, so a flood of idle connections cannot keep a health probe out;
- every answer closes its connection (the endpoints are scraped, not browsed at length).

Handlers are plain functions, run on the loop: the endpoints only read a prepared document
or the metrics registry. Paths under a ``slow`` prefix (the workers' ``/state/`` reads,
which may wait for a task's gate) run on a small thread pool instead, at most
``MAX_SLOW_PENDING`` at a time (more are answered 503 at once), so a probe of ``/healthz``
or a scrape never waits behind them. Only GET and HEAD are served.

Example::

    server = HttpServer("127.0.0.1", 0, lambda req: Response(200, "text/plain", b"ok\\n"))
    print(server.server_port)
    server.shutdown()
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

from processor.threads import DaemonExecutor

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 256
SLOW_THREADS = 4
MAX_SLOW_PENDING = 32


# On every answer, unless the handler gives its own: nothing is cached, sniffed as another
# type, framed by another site, or allowed to load anything (a page that needs more, as the
# status page's inline script and style, names it in its own Content-Security-Policy).
SAFE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-case


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Response]


def _text(status: int, message: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", f"{message}\n".encode())


def parse_head(head: bytes) -> Request | Response:
    """The request a head (up to its blank line) makes, or the error to answer it with."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return _text(400, "bad request line")
    if not version.startswith("HTTP/1."):
        return _text(505, "HTTP/1.x only")
    if method not in ("GET", "HEAD"):
        return Response(405, "text/plain", b"GET or HEAD only\n", [("Allow", "GET, HEAD")])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return _text(400, "bad header line")
        headers[name.lower()] = value.strip()
    try:
        parts = urlsplit(target)  # ValueError: "http://[x/", an IPv6 host that is not one
        return Request(method, unquote(parts.path) or "/", parse_qs(parts.query), headers)
    except ValueError:
        return _text(400, "bad request target")


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: any free port, see ``server_port``) from a
    daemon thread; binding errors (``OSError``) are raised here, by the constructor."""

    def __init__(self, host: str, port: int, handler: Handler, slow: tuple[str, ...] = ()) -> None:
        self._handler = handler
        self._slow = slow  # path prefixes answered on the pool
        self._pool = DaemonExecutor(SLOW_THREADS, "http-slow") if slow else None
        self._slow_pending = 0
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=128)
        self.server_port: int = self._socket.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        # Connections that have not sent their whole head yet, oldest first.
        self._waiting: collections.OrderedDict[asyncio.StreamWriter, None] = (
            collections.OrderedDict()
        )
        self._open = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-http", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=self._socket, limit=MAX_HEAD_BYTES)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            # Open connections end here, while the loop still runs their clean-up.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    def shutdown(self) -> None:
        """Stop serving and close the listening socket (idempotent)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    server_close = shutdown  # the standard library servers' name for the second half

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        if self._open > MAX_CONNECTIONS and self._waiting:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            oldest.close()  # its read ends; that connection's task cleans up
        self._waiting[writer] = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            except (asyncio.LimitOverrunError, ValueError):
                response: Request | Response = _text(431, "request head too large")
            else:
                response = parse_head(head[:-4])
            finally:
                self._waiting.pop(writer, None)
            head_only = isinstance(response, Request) and response.method == "HEAD"
            if isinstance(response, Request):
                response = await self._answer_off_loop(response)
            await asyncio.wait_for(self._write(writer, response, head_only), WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self._open -= 1
            self._waiting.pop(writer, None)
            writer.close()

    async def _answer_off_loop(self, request: Request) -> Response:
        if self._pool is None or not request.path.startswith(self._slow):
            return self._answer(request)
        if self._slow_pending >= MAX_SLOW_PENDING:
            return Response(
                503, "text/plain", b"too many requests in flight\n", [("Retry-After", "1")]
            )
        self._slow_pending += 1  # only the loop's thread counts: no lock
        try:
            return await self._loop.run_in_executor(self._pool, self._answer, request)
        finally:
            self._slow_pending -= 1

    def _answer(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            return _text(500, "internal error")

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, response: Response, head_only: bool) -> None:
        reason = HTTPStatus(response.status).phrase
        own = {name.lower() for name, _ in response.headers}
        lines = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in SAFE_HEADERS if name.lower() not in own),
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(response.body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
