"""``processor state get|scan``: a key's committed value (or an operator's keys) from the
workers' ``/state/`` routes (docs/query-state.md).

By default it asks the coordinator, which forwards the request to the worker whose task owns
the key (a scan: to every worker with tasks of the operator, merged). Given workers' URLs
(``--url``, repeated) it asks each in turn: the one whose task owns the key answers, the
others say 421 (not on this worker). A 503 (the task restores or moves, or the coordinator
does not know where it is yet) is tried again, for a while.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

# Which answer to report when no worker has the value: the most telling first.
_RANK = {200: 0, 503: 1, 404: 2, 421: 3}


@dataclass(frozen=True)
class Answer:
    """One worker's answer: its HTTP status and JSON document (or error text)."""

    status: int
    doc: dict[str, Any]
    url: str


def request(url: str, token: str = "", timeout: float = 5) -> Answer:
    """GET ``url``: its status and JSON (``{"error": ...}`` when it is not JSON or the
    worker cannot be reached, status 0)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        ) as r:
            return Answer(r.status, json.load(r), url)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {"error": body.decode(errors="replace").strip()}
        return Answer(exc.code, doc if isinstance(doc, dict) else {"error": doc}, url)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Answer(0, {"error": f"no answer from {url}: {exc}"}, url)


def key_url(base: str, operator: str, key: str, fresh: bool = False) -> str:
    """``<base>/state/<operator>/<key>``, both URL-encoded.

    Example: ``key_url("http://w:9401", "counts", "a b") == "http://w:9401/state/counts/a%20b"``
    """
    url = f"{base.rstrip('/')}/state/{quote(operator, safe='')}/{quote(key, safe='')}"
    return url + ("?fresh=true" if fresh else "")


def get(
    urls: list[str],
    operator: str,
    key: str,
    token: str = "",
    fresh: bool = False,
    retry_s: float = 10.0,
) -> Answer:
    """The value of ``key``: the first 200 of the workers at ``urls``; else, once no worker
    says 503 any more or ``retry_s`` is over, the most telling answer (503, 404, 421)."""
    deadline = time.monotonic() + retry_s
    while True:
        answers = [request(key_url(u, operator, key, fresh), token) for u in urls]
        best = min(answers, key=lambda a: _RANK.get(a.status, 4))
        if best.status != 503 or time.monotonic() >= deadline:
            return best
        time.sleep(float(best.doc.get("retry_after", 0.5)))


def scan(
    urls: list[str],
    operator: str,
    prefix: str = "",
    limit: int = 100,
    token: str = "",
    fresh: bool = False,
) -> list[Answer]:
    """Every worker's scan of ``operator`` (keys starting with ``prefix``)."""
    query = urlencode({"prefix": prefix, "limit": limit, **({"fresh": "true"} if fresh else {})})
    path = f"/state/{quote(operator, safe='')}?{query}"
    return [request(u.rstrip("/") + path, token) for u in urls]


def main(
    command: str,
    urls: list[str],
    operator: str,
    key: str,
    prefix: str,
    limit: int,
    token: str,
    fresh: bool,
) -> int:
    """Print the answer as JSON; exit 0 (found), 1 (not found or refused), 2 (unreachable)."""
    if command == "get":
        answer = get(urls, operator, key, token, fresh)
        print(json.dumps(answer.doc, ensure_ascii=False))
        return 0 if answer.status == 200 else 2 if answer.status == 0 else 1
    answers = scan(urls, operator, prefix, limit, token, fresh)
    items = [item for a in answers if a.status == 200 for item in a.doc.get("items", [])]
    for item in sorted(items, key=lambda i: str(i["key"])):
        print(json.dumps(item, ensure_ascii=False))
    failed = [a for a in answers if a.status != 200]
    for a in failed:
        print(json.dumps({"url": a.url, "status": a.status, **a.doc}, ensure_ascii=False))
    return 0 if not failed else 2 if all(a.status == 0 for a in failed) else 1


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from processor.commands.base import COORDINATOR_URL

    commands = parser.add_subparsers(dest="state_command", required=True, help="get or scan")
    get_one = commands.add_parser("get", help="one key's value, as of its last checkpoint")
    get_one.add_argument("operator", help="the operator's name (name=, or derived)")
    get_one.add_argument("key", help="the key as a sink shows it; <key>@<start> for a window")
    scan_all = commands.add_parser("scan", help="an operator's keys and values")
    scan_all.add_argument("operator", help="the operator's name (name=, or derived)")
    scan_all.add_argument("--prefix", default="", help="keys starting with this text only")
    scan_all.add_argument("--limit", type=int, default=100, help="per worker, at most 1,000")
    for command in (get_one, scan_all):
        command.add_argument(
            "--url",
            action="append",
            help="the coordinator's metrics URL, which forwards to the owning worker (default "
            f"{COORDINATOR_URL}), or a worker's, repeated; token: PROCESSOR_API_TOKEN",
        )
        command.add_argument(
            "--fresh", action="store_true", help="the live value, not yet committed"
        )


def run(args: argparse.Namespace) -> int:
    """``processor state get|scan``."""
    from processor.commands.base import COORDINATOR_URL
    from processor.config import load_settings

    return main(
        args.state_command,
        args.url or [COORDINATOR_URL],
        args.operator,
        getattr(args, "key", ""),
        getattr(args, "prefix", ""),
        getattr(args, "limit", 100),
        load_settings().api_token.get_secret_value(),
        args.fresh,
    )
