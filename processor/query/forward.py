"""Queryable state through the coordinator: its port serves the workers' ``/state/`` routes
(`processor.query.routes`) and forwards each request to the worker whose task owns
the key, by the same routing as the workers (`processor.query.owners`: the shuffle's
CRC-32 of the key text), the coordinator's current placement, and the URL each worker
announces on the control topic (`processor.models.control.Endpoint`).

- ``GET /state/<operator>/<key>``: forwarded to the worker of the key's task; its status,
  body and ``Retry-After`` are the answer. A task placed nowhere, a worker whose URL is not
  known yet, or one that does not answer in time: 503 + ``Retry-After``.
- ``GET /state/<operator>?prefix=&limit=``: forwarded to every worker with tasks of the
  operator's stage; the items merged (`merge_scans`), the first ``limit`` by key.

Runs on the HTTP server's thread pool (``slow`` paths), so it may block on the network.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from processor.config import Settings
from processor.endpoints import SIGNATURE_HEADER, signature
from processor.http_server import Request, Response
from processor.jobs.graph import JobGraph
from processor.query.owners import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Operator,
    key_tasks,
    operators,
    partitions_of,
    stage_sizes,
    stage_tasks,
)
from processor.query.routes import error_answer, json_answer
from processor.worker_hosts import DEFAULT_WORKER_HOSTS, WorkerHosts, url_problem

# Hosts that mean "every interface": not an address another machine can reach.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# A worker answers 503 itself once its task's state is busy for the timeout: waiting a bit
# longer here lets that answer (and its reason) through rather than a bare timeout.
FORWARD_MARGIN_S = 1.0


def advertised_url(settings: Settings) -> str:
    """The URL others reach this worker's state routes at: ``PROCESSOR_STATE_API_URL``, else
    its metrics host and port (the host name for a wildcard host).

    Example: metrics on ``127.0.0.1:9401`` -> ``"http://127.0.0.1:9401"``
    """
    if settings.state_api_url:
        return settings.state_api_url.rstrip("/")
    host = settings.metrics_host
    if host in WILDCARD_HOSTS:
        host = socket.gethostname()
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"http://{host}:{settings.metrics_port}"


@dataclass(frozen=True)
class Target:
    """Where a task's state is served: its worker and that worker's URL."""

    worker: str
    url: str


class WorkerDirectory:
    """The coordinator's current placement (task -> worker) and the URLs of its live
    workers (`processor.worker_hosts` says which URLs are kept).

    Thread-safe: the coordinator's loop updates it, request threads look up.

    Example::

        directory = WorkerDirectory()
        directory.placed({"count-0": "w1"}, alive=["w1"])
        directory.endpoint("w1", "http://127.0.0.1:9401", alive=True)  # None: kept
        directory.locate("count-0") == Target("w1", "http://127.0.0.1:9401")
    """

    def __init__(self, hosts: WorkerHosts | None = None) -> None:
        self._hosts = hosts or WorkerHosts.parse(DEFAULT_WORKER_HOSTS)
        self._lock = threading.Lock()
        self._placement: dict[str, str] = {}
        self._urls: dict[str, str] = {}
        self.sizes: Mapping[str, int] = {}  # stage -> its tasks, as placed

    def placed(self, placement: Mapping[str, str], alive: Iterable[str]) -> None:
        """The new placement and the workers alive now: the URLs of the others are dropped."""
        with self._lock:
            self._placement = dict(placement)
            self.sizes = stage_sizes(placement)
            live = frozenset(alive)
            self._urls = {w: url for w, url in self._urls.items() if w in live}

    def endpoint(self, worker: str, url: str, alive: bool) -> str | None:
        """Keep ``url`` for ``worker`` (``alive``: its heartbeats are heard); else why not."""
        if not alive:
            return f"worker {worker!r} is not alive"
        problem = url_problem(url, self._hosts)
        if problem is not None:
            return f"URL of worker {worker!r} refused: {problem}"
        with self._lock:
            self._urls[worker] = url.rstrip("/")
        return None

    def locate(self, task_id: str) -> Target | str:
        """Where the task is served; else why it cannot be asked (a str)."""
        with self._lock:
            worker = self._placement.get(task_id)
            url = self._urls.get(worker or "")
        if worker is None:
            return f"task {task_id} is not placed on any worker"
        if url is None:
            return f"worker {worker} (task {task_id}) has not announced its URL"
        return Target(worker, url)


# Statuses a worker's state routes answer with; any other is no answer of theirs.
WORKER_STATUSES = frozenset({200, 400, 404, 421, 503})
MAX_ANSWER_BYTES = 8 * 1024 * 1024
CHUNK_BYTES = 64 * 1024


def forward(url: str, path: str, headers: Mapping[str, str], timeout_s: float) -> Response:
    """GET ``url`` + ``path`` (path and query, encoded) with ``headers`` (the coordinator's
    own credential, never the caller's): the worker's status, JSON body and ``Retry-After``.
    503 when the worker cannot be reached or does not answer within ``timeout_s`` in all;
    502 when its answer is not a worker's: another status, not ``application/json``, not
    JSON, or larger than `MAX_ANSWER_BYTES`.

    Example: ``forward("http://127.0.0.1:9401", "/state/counts/apple", {}, 3.0).status == 200``
    """
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = time.monotonic() + timeout_s
    connection = kind(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        connection.request("GET", parts.path.rstrip("/") + path, headers=dict(headers))
        answer = connection.getresponse()
        body = _read_bounded(answer, deadline)
        return _checked(answer, body, url)
    except (OSError, http.client.HTTPException) as exc:
        return error_answer(503, f"no answer from {url}: {exc}")
    finally:
        connection.close()


def _read_bounded(answer: http.client.HTTPResponse, deadline: float) -> bytes | None:
    """The body, or None when it is larger than `MAX_ANSWER_BYTES`; TimeoutError past
    ``deadline``."""
    chunks: list[bytes] = []
    size = 0
    while chunk := answer.read(CHUNK_BYTES):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long")
        chunks.append(chunk)
    return b"".join(chunks)


def _checked(answer: http.client.HTTPResponse, body: bytes | None, url: str) -> Response:
    media = (answer.getheader("Content-Type") or "").partition(";")[0].strip().lower()
    if answer.status not in WORKER_STATUSES:
        return error_answer(502, f"{url} answered {answer.status}, not as a worker does")
    if body is None:
        return error_answer(502, f"{url} answered more than {MAX_ANSWER_BYTES} bytes")
    if media != "application/json":
        return error_answer(502, f"{url} answered {media or 'no type'!r}, not JSON")
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return error_answer(502, f"{url} answered something that is not JSON")
    retry = answer.getheader("Retry-After") or ""
    headers = [("Retry-After", retry)] if retry.isdecimal() and len(retry) <= 4 else []
    return Response(answer.status, "application/json", body, headers)


def merge_scans(
    answers: Mapping[str, Response], tasks: list[str], unplaced: Mapping[str, str], limit: int
) -> dict[str, Any]:
    """One scan from the workers' (``answers``, by worker): their items, the first ``limit``
    by key (a key two workers gave, as a task moved: the higher checkpoint's), every task of
    the stage with the checkpoint read or why it was not, and each worker's status.

    Example: two workers' ``{"items": [{"key": "b", ...}]}`` and ``{"items": [{"key": "a",
    ...}]}`` with ``limit=1`` merge to the ``"a"`` item alone.
    """
    by_key: dict[str, dict[str, Any]] = {}
    read: dict[str, Any] = {}
    workers: dict[str, Any] = {}
    kind = "committed"
    for worker, answer in sorted(answers.items()):
        doc = _document(answer)
        if answer.status != 200:
            workers[worker] = {"status": answer.status, "error": doc.get("error", "")}
            continue
        workers[worker] = {"status": 200}
        kind = str(doc.get("kind", kind))
        tasks_read, items_read = doc.get("tasks"), doc.get("items")
        read.update(tasks_read if isinstance(tasks_read, dict) else {})
        for item in items_read if isinstance(items_read, list) else []:
            if not isinstance(item, dict) or "key" not in item:
                continue  # not a worker's item: the rest still merge
            held = by_key.get(str(item["key"]))
            if held is None or _checkpoint(item) > _checkpoint(held):
                by_key[str(item["key"])] = item
    for task_id in tasks:
        if task_id not in read:
            read[task_id] = unplaced.get(task_id, "not read: its worker did not answer")
    items = [by_key[key] for key in sorted(by_key)[:limit]]
    return {"kind": kind, "tasks": read, "workers": workers, "items": items}


def _checkpoint(item: dict[str, Any]) -> int:
    checkpoint = item.get("checkpoint", 0)
    return checkpoint if type(checkpoint) is int else 0


def _document(answer: Response) -> dict[str, Any]:
    try:
        doc = json.loads(answer.body)
    except ValueError:
        return {"error": answer.body.decode(errors="replace").strip()}
    return doc if isinstance(doc, dict) else {"error": str(doc)}


class ForwardRoutes:
    """The coordinator's ``/state/`` routes: each request forwarded to the owning worker(s).

    Example::

        routes = ForwardRoutes(graph, 4, directory, timeout_s=2.0)
        routes(Request("GET", "/state/counts/apple", {}, {}))  # the owning worker's answer

    The caller's credential (``Authorization``, ``?token=``) is never passed on. With a
    ``token`` (the coordinator's ``PROCESSOR_API_TOKEN``, which the workers share), each
    request is signed with it (`processor.endpoints.signature`): a worker's URL comes from
    the control topic, so the token itself is never sent there either.
    """

    def __init__(
        self,
        graph: JobGraph,
        partitions: int,
        directory: WorkerDirectory,
        timeout_s: float,
        token: str = "",
    ) -> None:
        self.operators = operators(graph)
        self.partitions = partitions
        self.directory = directory
        self.timeout_s = timeout_s + FORWARD_MARGIN_S
        self._secret = token.encode()

    def __call__(self, request: Request) -> Response | None:
        """The answer to a ``/state/`` request; None for any other path."""
        parts = request.path.split("/", 3)
        if len(parts) < 3 or parts[0] or parts[1] != "state" or not parts[2]:
            return None
        operator = self.operators.get(parts[2])
        if operator is None:
            names = sorted(self.operators)
            return error_answer(404, f"no stateful operator {parts[2]!r}", operators=names)
        passed = {name: values for name, values in request.query.items() if name != "token"}
        query = urlencode(passed, doseq=True)
        path = f"/state/{quote(parts[2], safe='')}"
        headers = self._headers(request.path, passed)
        if len(parts) == 4:
            path += f"/{quote(parts[3], safe='')}" + (f"?{query}" if query else "")
            return self.get(operator, parts[3], path, headers)
        limit_text = (request.query.get("limit") or [str(DEFAULT_LIMIT)])[0]
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
            return error_answer(400, f"limit must be 1 to {MAX_LIMIT}")
        path += f"?{query}" if query else ""
        return self.scan(operator, int(limit_text), path, headers)

    def _headers(self, path: str, query: Mapping[str, list[str]]) -> dict[str, str]:
        if not self._secret:
            return {}
        return {SIGNATURE_HEADER: signature(self._secret, path, query, int(time.time()))}

    def get(
        self, operator: Operator, shown: str, path: str, headers: Mapping[str, str]
    ) -> Response:
        """The answer of the worker whose task owns the key. A key with two readings (``5``:
        the string or the int) may have two tasks: their workers are asked in turn."""
        partitions = partitions_of(operator, self.partitions, self.directory.sizes)
        tasks = key_tasks(operator, shown, partitions)
        if tasks is None:
            return error_answer(400, "a windowed operator's key is <key>@<window start>")
        asked: set[str] = set()
        misses: list[Response] = []
        for task_id in tasks:
            target = self.directory.locate(task_id)
            if isinstance(target, str):
                return error_answer(503, target, task=task_id)
            if target.url in asked:
                continue  # that worker tried every reading of the key it holds
            asked.add(target.url)
            answer = forward(target.url, path, headers, self.timeout_s)
            if answer.status not in (404, 421):
                return answer
            misses.append(answer)
        # As a worker does: a 421 (the placement moved: the value may be there) first.
        return min(misses, key=lambda answer: answer.status != 421)

    def scan(
        self, operator: Operator, limit: int, path: str, headers: Mapping[str, str]
    ) -> Response:
        """Every worker with tasks of the operator's stage asked; their items merged."""
        partitions = partitions_of(operator, self.partitions, self.directory.sizes)
        tasks = stage_tasks(operator, partitions)
        urls: dict[str, str] = {}
        unplaced: dict[str, str] = {}
        for task_id in tasks:
            target = self.directory.locate(task_id)
            if isinstance(target, str):
                unplaced[task_id] = f"not read: {target}"
            else:
                urls[target.worker] = target.url
        answers = {w: forward(url, path, headers, self.timeout_s) for w, url in urls.items()}
        merged = merge_scans(answers, tasks, unplaced, limit)
        return json_answer(200, {"operator": operator.node.name, **merged})
