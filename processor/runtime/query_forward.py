"""Queryable state through the coordinator: its port serves the workers' ``/state/`` routes
(`processor.runtime.query_routes`) and forwards each request to the worker whose task owns
the key, by the same routing as the workers (`processor.runtime.query`: the shuffle's
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from processor.config import Settings
from processor.http_server import Request, Response
from processor.jobs.graph import JobGraph
from processor.runtime.query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Operator,
    key_tasks,
    operators,
    stage_tasks,
)
from processor.runtime.query_routes import error_answer, json_answer

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
    """The coordinator's current placement (task -> worker) and the workers' URLs.

    Thread-safe: the coordinator's loop updates it, request threads look up.

    Example::

        directory = WorkerDirectory()
        directory.placed({"count-0": "w1"})
        directory.endpoint("w1", "http://w1:9401")
        directory.locate("count-0") == Target("w1", "http://w1:9401")
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._placement: dict[str, str] = {}
        self._urls: dict[str, str] = {}

    def placed(self, placement: Mapping[str, str]) -> None:
        with self._lock:
            self._placement = dict(placement)

    def endpoint(self, worker: str, url: str) -> None:
        with self._lock:
            self._urls[worker] = url

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


def forward(url: str, path: str, authorization: str, timeout_s: float) -> Response:
    """GET ``url`` + ``path`` (path and query, encoded): the answer's status, body and
    ``Retry-After``; 503 when the worker cannot be reached or does not answer in time.

    Example: ``forward("http://w1:9401", "/state/counts/apple", "", 3.0).status == 200``
    """
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    headers = {"Authorization": authorization} if authorization else {}
    connection = kind(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        connection.request("GET", parts.path.rstrip("/") + path, headers=headers)
        answer = connection.getresponse()
        body = answer.read()
        retry = answer.getheader("Retry-After")
        content_type = answer.getheader("Content-Type") or "application/json"
        return Response(
            answer.status, content_type, body, [("Retry-After", retry)] if retry else []
        )
    except (OSError, http.client.HTTPException) as exc:
        return error_answer(503, f"no answer from {url}: {exc}")
    finally:
        connection.close()


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
        read.update(doc.get("tasks", {}))
        for item in doc.get("items", []):
            held = by_key.get(str(item["key"]))
            if held is None or item.get("checkpoint", 0) > held.get("checkpoint", 0):
                by_key[str(item["key"])] = item
    for task_id in tasks:
        if task_id not in read:
            read[task_id] = unplaced.get(task_id, "not read: its worker did not answer")
    items = [by_key[key] for key in sorted(by_key)[:limit]]
    return {"kind": kind, "tasks": read, "workers": workers, "items": items}


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
    """

    def __init__(
        self, graph: JobGraph, partitions: int, directory: WorkerDirectory, timeout_s: float
    ) -> None:
        self.operators = operators(graph)
        self.partitions = partitions
        self.directory = directory
        self.timeout_s = timeout_s + FORWARD_MARGIN_S

    def __call__(self, request: Request) -> Response | None:
        """The answer to a ``/state/`` request; None for any other path."""
        parts = request.path.split("/", 3)
        if len(parts) < 3 or parts[0] or parts[1] != "state" or not parts[2]:
            return None
        operator = self.operators.get(parts[2])
        if operator is None:
            names = sorted(self.operators)
            return error_answer(404, f"no stateful operator {parts[2]!r}", operators=names)
        query = urlencode(request.query, doseq=True)
        path = f"/state/{quote(parts[2], safe='')}"
        authorization = request.headers.get("authorization", "")
        if len(parts) == 4:
            path += f"/{quote(parts[3], safe='')}" + (f"?{query}" if query else "")
            return self.get(operator, parts[3], path, authorization)
        limit_text = (request.query.get("limit") or [str(DEFAULT_LIMIT)])[0]
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
            return error_answer(400, f"limit must be 1 to {MAX_LIMIT}")
        path += f"?{query}" if query else ""
        return self.scan(operator, int(limit_text), path, authorization)

    def get(self, operator: Operator, shown: str, path: str, authorization: str) -> Response:
        """The answer of the worker whose task owns the key. A key with two readings (``5``:
        the string or the int) may have two tasks: their workers are asked in turn."""
        tasks = key_tasks(operator, shown, self.partitions)
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
            answer = forward(target.url, path, authorization, self.timeout_s)
            if answer.status not in (404, 421):
                return answer
            misses.append(answer)
        # As a worker does: a 421 (the placement moved: the value may be there) first.
        return min(misses, key=lambda answer: answer.status != 421)

    def scan(self, operator: Operator, limit: int, path: str, authorization: str) -> Response:
        """Every worker with tasks of the operator's stage asked; their items merged."""
        tasks = stage_tasks(operator, self.partitions)
        urls: dict[str, str] = {}
        unplaced: dict[str, str] = {}
        for task_id in tasks:
            target = self.directory.locate(task_id)
            if isinstance(target, str):
                unplaced[task_id] = f"not read: {target}"
            else:
                urls[target.worker] = target.url
        answers = {w: forward(url, path, authorization, self.timeout_s) for w, url in urls.items()}
        merged = merge_scans(answers, tasks, unplaced, limit)
        return json_answer(200, {"operator": operator.node.name, **merged})
