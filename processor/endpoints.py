"""The services' HTTP endpoints: ``/metrics`` (Prometheus) and ``/healthz`` (the main loop's
liveness, processor/health.py), on the server of `processor.http_server`; the coordinator adds
its status pages (`processor.coordinator.status.page`)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable, Iterator, Mapping
from urllib.parse import urlencode

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.metrics_core import Metric

from processor.health import LoopHealth
from processor.http_server import HttpServer, Request, Response


class LabelledRegistry:
    """The default registry with constant labels added to every sample.

    A worker labels everything it exports with its worker id (``worker``), the id the
    coordinator and the logs use; Prometheus keeps it (honor_labels), whatever the target's
    address or pod name.
    """

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                s._replace(labels={**s.labels, **self._labels}) for s in family.samples
            ]
            yield labelled


# Host names a browser sends for a server on loopback. Any other name there is a page on
# another site reaching 127.0.0.1 by DNS rebinding: refused.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
OPEN_PATHS = frozenset({"/metrics", "/healthz"})  # never behind the token: probes, scrapes


def _host_name(header: str) -> str:
    """``Host`` without its port: ``[::1]:9400`` -> ``[::1]``, ``a:1`` -> ``a``."""
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def serve(
    host: str,
    port: int,
    health: LoopHealth | None = None,
    labels: Mapping[str, str] | None = None,
    token: str = "",
    pages: Callable[[Request], Response | None] | None = None,
    slow: tuple[str, ...] = (),
    hosts: frozenset[str] = frozenset(),
) -> HttpServer:
    """Serve the endpoints in a daemon thread; returns the server (``.shutdown()`` stops it).

    ``/metrics`` and ``/healthz`` always; ``pages`` answers any other path (None: not
    found), such as the coordinator's status page; those under a ``slow`` prefix run off the
    server's loop (`HttpServer`). ``labels`` are added to every exported
    sample. ``token`` (``PROCESSOR_API_TOKEN``): every other path wants
    ``Authorization: Bearer <token>`` (or ``?token=`` for a browser). Against DNS rebinding
    (a page of another site that reaches this server under its own name): served on a
    loopback address, every request must name a loopback name (or one of ``hosts``) in its
    ``Host``; served for the network without a token, every request but ``/metrics`` and
    ``/healthz`` must name an IP address, a loopback name or one of ``hosts``.
    """
    registry = LabelledRegistry(labels) if labels else REGISTRY
    loopback = host in LOOPBACK_NAMES
    names = LOOPBACK_NAMES | {name.lower() for name in hosts}
    secret = token.encode()

    def app(request: Request) -> Response:
        path = request.path
        checked = loopback or (not secret and path not in OPEN_PATHS)
        if checked and not _host_allowed(request.headers.get("host", ""), names, loopback):
            return Response(421, "text/plain", b"this server does not answer to that Host\n")
        if path == "/metrics":
            return Response(200, CONTENT_TYPE_LATEST, generate_latest(registry))
        if path == "/healthz" and health is not None:
            ok, line = health.check()
            return Response(200 if ok else 503, "text/plain", line.encode())
        if secret and not _authorized(request, secret):
            return Response(
                401,
                "text/plain",
                b"this endpoint wants Authorization: Bearer <PROCESSOR_API_TOKEN>\n",
                [("WWW-Authenticate", 'Bearer realm="processor"')],
            )
        answer = pages(request) if pages is not None else None
        if answer is None:
            return Response(404, "text/plain", b"not found: try /metrics or /healthz\n")
        return answer

    return HttpServer(host, port, app, slow)


def _host_allowed(header: str, names: frozenset[str], loopback: bool) -> bool:
    """Whether a request's ``Host`` may be answered. An IP address is never a rebinding
    (that needs a name the attacker's DNS answers), except on loopback where only its own
    names are expected."""
    name = _host_name(header).lower()
    if name in names:
        return True
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return not loopback


def _authorized(request: Request, secret: bytes) -> bool:
    if SIGNATURE_HEADER in request.headers:
        return _signed(request, secret, time.time())
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        given = (request.query.get("token") or [""])[0]
    return hmac.compare_digest(given.strip().encode(), secret)


# The coordinator's credential when it forwards a state request to a worker: not the token
# itself (the worker's URL comes from the control topic, which others may write), but an
# HMAC with it of the request's path, query and time, good for `SIGNATURE_WINDOW_S`.
SIGNATURE_HEADER = "x-processor-signature"
SIGNATURE_WINDOW_S = 30


def signature(secret: bytes, path: str, query: Mapping[str, list[str]], at: int) -> str:
    """The ``X-Processor-Signature`` of a GET of ``path`` (not percent-encoded) with
    ``query`` (``?token=`` aside) at ``at`` (Unix seconds).

    Example: ``signature(b"t", "/state/counts/apple", {}, 1700000000)`` ->
    ``"1700000000:<64 hex digits>"``
    """
    canonical = urlencode(sorted((k, v) for k, v in query.items() if k != "token"), doseq=True)
    text = f"{at}\n{path}\n{canonical}".encode()
    return f"{at}:{hmac.new(secret, text, hashlib.sha256).hexdigest()}"


def _signed(request: Request, secret: bytes, now: float) -> bool:
    given = request.headers.get(SIGNATURE_HEADER, "")
    at = given.partition(":")[0]
    if not at.isdecimal() or len(at) > 12 or abs(now - int(at)) > SIGNATURE_WINDOW_S:
        return False
    expected = signature(secret, request.path, request.query, int(at))
    return hmac.compare_digest(given.encode(), expected.encode())
