"""The worker's queryable-state routes, on its metrics port (only with
``PROCESSOR_STATE_API=on``; behind ``PROCESSOR_API_TOKEN`` when that is set, see
`processor.endpoints`):

- ``GET /state/<operator>/<key>``: the key's value as of its task's last committed
  checkpoint (``?fresh=true``: RocksDB's live value, which a failure may still roll back);
  ``<key>@<window start>`` for a window's accumulator;
- ``GET /state/<operator>?prefix=...&limit=...``: the keys (plain string keys starting
  with ``prefix``) of the operator's tasks on this worker, ``limit`` at most 1,000.

Statuses: 200 with JSON; 404 no such operator, or no value; 421 the key's task is not on
this worker (the answer names the worker it is assigned to, if known); 503 with
``Retry-After`` while the task restores, moves or is busy; 400 a bad request.
"""

from __future__ import annotations

import json
import time
from typing import Any

from processor import metrics
from processor.api.ops import TAGGED, load_value, sink_key_of
from processor.http_server import Request, Response
from processor.query.owners import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Operator,
    QueryRegistry,
    key_candidates,
    owner,
    split_window,
)
from processor.state.query_gate import NotServing, Read, TaskGate

RETRY_AFTER_S = 1


def json_answer(
    status: int, doc: dict[str, Any], headers: list[tuple[str, str]] | None = None
) -> Response:
    """A JSON answer. Example: ``json_answer(200, {"key": "a"}).body == b'{"key":"a"}\\n'``"""
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    return Response(status, "application/json", body, headers or [])


def error_answer(status: int, message: str, **more: Any) -> Response:
    """``{"error": message, ...more}``; a 503 says ``Retry-After``.

    Example: ``error_answer(503, "restoring").headers == [("Retry-After", "1")]``
    """
    headers = [("Retry-After", str(RETRY_AFTER_S))] if status == 503 else []
    return json_answer(status, {"error": message, **more}, headers)


def _flag(request: Request, name: str) -> bool:
    return (request.query.get(name) or [""])[0].lower() in ("true", "1", "yes", "on")


class StateRoutes:
    """Answers ``/state/...`` requests from a worker's `QueryRegistry`.

    Example::

        routes = StateRoutes(registry, "worker-1", timeout_s=2.0)
        routes(Request("GET", "/state/counts/apple", {}, {}))  # 200 {"key": "apple", ...}
    """

    def __init__(
        self, registry: QueryRegistry, worker_id: str, timeout_s: float, job: str = ""
    ) -> None:
        self.registry = registry
        self.worker_id = worker_id
        self.timeout_s = timeout_s
        self._job = job

    def __call__(self, request: Request) -> Response | None:
        """The answer to a ``/state/`` request; None for any other path."""
        parts = request.path.split("/", 3)
        if len(parts) < 3 or parts[0] or parts[1] != "state" or not parts[2]:
            return None
        started = time.perf_counter()
        answer = self._answer(request, parts)
        route = "get" if len(parts) == 4 else "scan"
        metrics.state_requests.labels(self._job, route, str(answer.status)).inc()
        if answer.status == 200:
            took = time.perf_counter() - started
            metrics.state_request_seconds.labels(self._job, route).observe(took)
        return answer

    def _answer(self, request: Request, parts: list[str]) -> Response:
        operator = self.registry.operators.get(parts[2])
        if operator is None:
            names = sorted(self.registry.operators)
            return error_answer(404, f"no stateful operator {parts[2]!r}", operators=names)
        fresh = _flag(request, "fresh")
        if len(parts) == 4:
            return self.get(operator, parts[3], fresh)
        prefix = (request.query.get("prefix") or [""])[0]
        limit_text = (request.query.get("limit") or [str(DEFAULT_LIMIT)])[0]
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
            return error_answer(400, f"limit must be 1 to {MAX_LIMIT}")
        return self.scan(operator, prefix, int(limit_text), fresh)

    def _gate(self, task_id: str) -> TaskGate | Response:
        found = self.registry.find(task_id)
        if isinstance(found, TaskGate):
            return found
        if found == self.worker_id:  # assigned here, not started yet (or restarting)
            return error_answer(503, f"task {task_id} is starting", task=task_id)
        return error_answer(421, "not on this worker", task=task_id, worker=found)

    def get(self, operator: Operator, shown: str, fresh: bool) -> Response:
        """One key's value (or a window's, for ``<key>@<start>`` of a windowed operator)."""
        window: int | None = None
        if operator.windowed:
            split = split_window(shown)
            if split is None:
                return error_answer(400, "a windowed operator's key is <key>@<window start>")
            shown, window = split
        # Of the candidates that found nothing: a 421 (it may be on another worker) tells
        # more than a 404 here.
        misses: list[Response] = []
        kind = "fresh" if fresh else "committed"
        for text in key_candidates(shown):
            task_id = owner(operator, text, self.registry.partitions_of(operator))
            gate = self._gate(task_id)
            if isinstance(gate, Response):
                if gate.status == 503:
                    return gate
                misses.append(gate)
                continue
            try:
                read = gate.get([operator.prefix() + text.encode()], self.timeout_s, fresh)
            except NotServing as exc:
                return error_answer(503, str(exc), task=task_id)
            raw = read.values[0]
            value = None if raw is None else load_value(raw)
            doc: dict[str, Any] = {"key": shown, "operator": operator.node.name}
            if window is not None:
                held = value.get(str(window)) if isinstance(value, dict) else None
                window_node = operator.window
                if held is not None and window_node is not None and window_node.session:
                    doc["window_end"], held = held[0], held[1]  # a session: [end, acc]
                doc["window"], value = window, held
            if value is None:
                misses.append(
                    error_answer(404, "no value", key=shown, **_about(read, task_id, kind))
                )
                continue
            return json_answer(200, {**doc, "value": value, **_about(read, task_id, kind)})
        if not misses:
            return error_answer(404, "no value")
        return min(misses, key=lambda answer: answer.status != 421)

    def scan(self, operator: Operator, prefix: str, limit: int, fresh: bool) -> Response:
        """Up to ``limit`` keys starting with ``prefix``, from the tasks here that serve."""
        items: list[dict[str, Any]] = []
        tasks: dict[str, Any] = {}
        base = operator.prefix()
        start = base + prefix.encode()
        for task_id in self.registry.tasks_of(operator):
            found = self.registry.find(task_id)
            if not isinstance(found, TaskGate):
                continue
            if len(items) >= limit:
                tasks[task_id] = "not read: the limit is reached"
                continue
            try:
                read = found.scan(start, start, limit - len(items), self.timeout_s, fresh)
            except NotServing as exc:
                tasks[task_id] = str(exc)
                continue
            tasks[task_id] = read.checkpoint
            for key, raw in read.items:
                text = key[len(base) :].decode()
                if prefix == "" or text[:1] != TAGGED:
                    shown = sink_key_of(text).decode()
                    item = {"key": shown, "value": load_value(raw), "task": task_id}
                    items.append({**item, "checkpoint": read.checkpoint})
        doc = {
            "operator": operator.node.name,
            "kind": "fresh" if fresh else "committed",
            "tasks": tasks,  # per task here: the checkpoint read, or why it was not
            "items": items,
        }
        return json_answer(200, doc)


def _about(read: Read, task_id: str, kind: str) -> dict[str, Any]:
    return {"checkpoint": read.checkpoint, "task": task_id, "kind": kind}
