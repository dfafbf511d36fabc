"""Which worker URLs the coordinator forwards state requests to (issue 41, item 2).

A worker announces its URL on the control topic (`processor.models.control.Endpoint`), and
anyone who may write that topic can announce one too. So the coordinator keeps a URL only

- for a worker that is alive: one whose heartbeats it hears (an endpoint naming any other
  worker id is skipped and counted), and only while it stays alive;
- that is a plain ``http://`` or ``https://`` URL with a host and nothing else: no user
  name or password, no query, no fragment;
- whose host `PROCESSOR_STATE_API_WORKERS` allows: a comma-separated list of host names,
  ``.domain`` suffixes and IP networks. The default allows loopback only, which is where
  ``processor local`` and the tests run their workers; a deployment names its workers'
  addresses (``10.0.0.0/8``, ``.workers.svc.cluster.local``).

Pure, standard library only.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_WORKER_HOSTS = "127.0.0.0/8,::1,localhost"
MAX_URL_CHARS = 2048

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class WorkerHosts:
    """The hosts a worker's URL may name.

    Example::

        hosts = WorkerHosts.parse("10.0.0.0/8,.svc.cluster.local,w1")
        hosts.allows("10.1.2.3") and hosts.allows("a.svc.cluster.local") and hosts.allows("w1")
        not hosts.allows("evil.example")
    """

    names: frozenset[str]
    suffixes: tuple[str, ...]
    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, text: str) -> WorkerHosts:
        """Raises ValueError for an entry that is none of a name, a suffix, a network."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[Network] = []
        for entry in (e.strip().lower() for e in text.split(",")):
            if not entry:
                continue
            if entry.startswith("."):
                suffixes.append(entry)
            elif entry[0].isdigit() or ":" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
            elif entry.replace("-", "").replace(".", "").isalnum() and entry.isascii():
                names.add(entry)
            else:
                raise ValueError(f"not a host name, .suffix or network: {entry!r}")
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def allows(self, host: str) -> bool:
        host = host.lower().strip("[]")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self.names or any(host.endswith(s) for s in self.suffixes)
        return any(address in network for network in self.networks)


def url_problem(url: str, hosts: WorkerHosts) -> str | None:
    """Why the coordinator will not forward to ``url``; None when it may.

    Example: ``url_problem("http://u:p@127.0.0.1:1", loopback)`` -> ``"it holds credentials"``
    """
    if len(url) > MAX_URL_CHARS or not url.isascii() or not url.isprintable():
        return "it is not a short printable URL"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it is not an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "it holds credentials"
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return "it has a query or a fragment"
    try:
        parts.port  # noqa: B018 - raises for a port that is not one
    except ValueError:
        return "its port is not a port"
    if not hosts.allows(parts.hostname):
        return f"its host {parts.hostname!r} is not in PROCESSOR_STATE_API_WORKERS"
    return None
