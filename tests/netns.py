"""Network partitions for tests: hosts in network namespaces the test makes itself.

A bridge ``pcxbr`` is the switch; each host is a namespace ``pcx-<name>`` with its own
10.203.0.N/24 on a veth pair whose other end is a port of the bridge. The root namespace is
on the switch too, as 10.203.0.1 (interface ``pcxroot``): processes there (the test, a
coordinator) reach every host, and every host reaches them, with no forwarding anywhere.

The bridge lives in a namespace of its own, ``pcx-switch``, not in the root namespace: with
br_netfilter loaded (``net.bridge.bridge-nf-call-iptables=1``, as Docker sets it), frames
bridged in the root namespace pass its iptables FORWARD chain, which Docker's policy DROPs:
host-to-host traffic died while root-to-host worked. The switch namespace has no rules.

Nothing leaves the machine:

- a host has no default route, only its subnet: every party of a test is on it (the root
  namespace as 10.203.0.1), and a default route via the bridge would be a way out on a
  machine that forwards (net.ipv4.ip_forward=1, as on a Docker host);
- the root namespace keeps an ``unreachable 10.203.0.0/24`` route of low priority. While the
  bridge exists its own route wins; once it is gone (after ``close``, or while a crashed run
  is cleaned up) a client still retrying a host's address fails at once instead of sending
  its SYNs out through the machine's default route (seen: a gateway answered them with
  HTTP). It stays after ``close`` on purpose, for exactly those clients.

``cut(host)`` makes a host a black hole: the ``blackhole`` qdisc, which drops every packet
and tells the sender it went out, at the root of both ends of its veth pair (the host's own
sends, and everything the bridge sends to it). Why a qdisc rather than bringing a link down:

- it is silent, as a real partition is: no carrier loss, no "network unreachable" error, no
  RST; peers see their packets vanish and find out by their own timeouts;
- it is instant and fully reversible: one qdisc per side, added or deleted in one netlink
  call each; links, addresses, routes and ARP entries are never touched, so ``heal`` needs no
  re-learning, and established TCP connections survive the cut and resume (retransmits);
- a host's loopback is untouched: a broker cut off still reaches itself.

(``netem loss 100%`` would do the same, but this machine's kernel has no sch_netem; the
blackhole qdisc is built in, and it is exactly a total loss without netem's knobs.)

Usage::

    with TestNetwork() as net:
        a = net.add_host("b1")                 # netns pcx-b1, address 10.203.0.2
        subprocess.Popen([*a.prefix, "python", "-m", "http.server", "--bind", a.address])
        net.cut(a); ...; net.heal(a)

Needs root (CAP_NET_ADMIN and the right to make namespaces): ``available()`` says whether
that works here, so a test can skip where it does not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from types import TracebackType

from tests.workers import WORKER_INDEX

# Every name and the subnet are this pytest-xdist worker's own (tests/workers.py): "pcx" and
# 10.203.0 outside xdist and on gw0, "pc1" and 10.203.1 on gw1, ...: two workers' networks
# neither share a name nor clean up each other's (remove_leftovers).
TAG = "pcx" if WORKER_INDEX == 0 else f"pc{WORKER_INDEX}"  # 3 characters: WORKER_INDEX < 10
BRIDGE = f"{TAG}br"
NETNS_PREFIX = f"{TAG}-"
SWITCH = f"{NETNS_PREFIX}switch"  # the namespace of the bridge (not a host's name: see _NAME)
ROOT_LINK = f"{TAG}root"  # the root namespace's interface on the switch
SUBNET = f"10.203.{WORKER_INDEX}"  # a /24: the root namespace is .1, hosts .2 and up
ROOT_ADDRESS = f"{SUBNET}.1"
GUARD_METRIC = "4000"  # above the bridge's own route for the subnet (metric 0)
MAX_HOSTS = 200
# Interface names are at most 15 characters: "pcxv" + 11 (root side), "pcxp" + 11 (host side)
# (on gw1 "pc1v", "pc1p").
_NAME = re.compile(r"(?!switch$)[a-z0-9][a-z0-9-]{0,10}")


class NetworkError(Exception):
    """An ``ip``/``tc`` command failed; the message names it and what it printed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check)


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def available() -> str:
    """Empty when namespaces, veths and bridges can be made here; else why not (a skip
    reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    probe = f"{NETNS_PREFIX}probe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    try:
        qdisc = _run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "blackhole"], False)
    finally:
        _ip("netns", "del", probe, check=False)
    if qdisc.returncode != 0:
        return f"no blackhole qdisc in this kernel (cut needs it): {qdisc.stderr.strip()}"
    return ""


@dataclass(frozen=True)
class Host:
    """One namespace on the test network."""

    name: str
    address: str  # its 10.203.0.N

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.name}"

    @property
    def prefix(self) -> list[str]:
        """Put this before a command to run it inside the host. ``ip netns exec`` execs the
        command, so the pid of the process started is the command's own (signals reach it)."""
        return ["ip", "netns", "exec", self.netns]

    @property
    def outer(self) -> str:
        """The switch's end of the host's veth pair (a bridge port)."""
        return f"{TAG}v{self.name}"

    @property
    def inner(self) -> str:
        """The host's own end of its veth pair."""
        return f"{TAG}p{self.name}"


class TestNetwork:
    """A switch, the root namespace and the hosts on it; a context manager that removes
    everything on exit."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self._cut: set[str] = set()
        self._open = False

    def __enter__(self) -> TestNetwork:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Make the switch and put the root namespace on it, after removing whatever a
        crashed run left behind."""
        remove_leftovers()
        _ip("route", "replace", "unreachable", f"{SUBNET}.0/24", "metric", GUARD_METRIC)
        _ip("netns", "add", SWITCH)
        self._open = True
        _ip("-n", SWITCH, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", SWITCH, "link", "set", BRIDGE, "up")
        port = f"{ROOT_LINK}p"
        _ip("link", "add", ROOT_LINK, "type", "veth", "peer", "name", port, "netns", SWITCH)
        _ip("-n", SWITCH, "link", "set", port, "master", BRIDGE)
        _ip("-n", SWITCH, "link", "set", port, "up")
        _ip("addr", "add", f"{ROOT_ADDRESS}/24", "dev", ROOT_LINK)
        _ip("link", "set", ROOT_LINK, "up")
        _wait_up(ROOT_LINK, None, port)

    def add_host(self, name: str) -> Host:
        """A new namespace ``pcx-<name>`` with lo up and the next free address."""
        if not self._open:
            raise NetworkError("open() the network before adding hosts")
        if not _NAME.fullmatch(name) or name in self.hosts:
            raise NetworkError(f"host name {name!r} is taken or not 1-11 of [a-z0-9-]")
        if len(self.hosts) >= MAX_HOSTS:
            raise NetworkError(f"at most {MAX_HOSTS} hosts")
        host = Host(name, f"{SUBNET}.{len(self.hosts) + 2}")
        self.hosts[name] = host
        ns = host.netns
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", SWITCH, "link", "add", host.outer, "type", "veth", "peer", "name", host.inner)
        _ip("-n", SWITCH, "link", "set", host.inner, "netns", ns)
        _ip("-n", SWITCH, "link", "set", host.outer, "master", BRIDGE)
        _ip("-n", SWITCH, "link", "set", host.outer, "up")
        _ip("-n", ns, "addr", "add", f"{host.address}/24", "dev", host.inner)
        _ip("-n", ns, "link", "set", host.inner, "up")
        _wait_up(host.inner, ns, host.outer)
        return host

    def cut(self, host: Host) -> None:
        """Cut ``host`` off from everyone (the other hosts and the root namespace)."""
        for cmd in self._blackholes(host, "add"):
            _run(cmd)
        self._cut.add(host.name)

    def heal(self, host: Host) -> None:
        """Undo ``cut``: the host's veth ends get their default qdiscs back."""
        for cmd in self._blackholes(host, "del"):
            _run(cmd, check=False)  # a side not cut (a cut that failed half-way) is fine
        self._cut.discard(host.name)

    def is_cut(self, host: Host) -> bool:
        return host.name in self._cut

    @staticmethod
    def _blackholes(host: Host, verb: str) -> list[list[str]]:
        kind = ["blackhole"] if verb == "add" else []
        return [
            ["tc", "-n", host.netns, "qdisc", verb, "dev", host.inner, "root", *kind],
            ["tc", "-n", SWITCH, "qdisc", verb, "dev", host.outer, "root", *kind],
        ]

    def close(self) -> None:
        """Remove every host and the bridge; processes still inside a namespace lose their
        network but are not killed (their owner stops them)."""
        self.hosts.clear()
        self._cut.clear()
        self._open = False
        remove_leftovers()


def _wait_up(inner: str, netns: str | None, outer: str, timeout: float = 10.0) -> None:
    """Until both ends of a veth pair (``inner`` in ``netns``, None: the root namespace;
    ``outer`` in the switch) are operationally up. The kernel activates a link's qdisc only
    then (linkwatch, up to a second after ``link set up``); until then every packet is
    dropped, and the first connection attempts of a test would time out."""
    deadline = time.monotonic() + timeout
    where = ["-n", netns] if netns else []
    while True:
        inside = _ip(*where, "-o", "link", "show", "dev", inner).stdout
        switch = _ip("-n", SWITCH, "-o", "link", "show", "dev", outer).stdout
        if "state UP" in inside and "state UP" in switch:
            return
        if time.monotonic() > deadline:
            raise NetworkError(f"the veth pair {inner}/{outer} is not up after {timeout}s")
        time.sleep(0.05)


def remove_leftovers() -> None:
    """Delete every ``pcx-*`` namespace (the switch and the hosts) and the root namespace's
    end of the switch, from this or an earlier (crashed) run."""
    listed = _ip("netns", "list", check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(NETNS_PREFIX):
            # A veth end inside a deleted namespace goes with it, and so does its peer;
            # unless a process still holds the namespace, hence the links below.
            _ip("netns", "del", name, check=False)
    links = _ip("-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        fields = line.split(":")
        if len(fields) > 1:
            name = fields[1].strip().split("@")[0]
            if name.startswith(TAG):
                _ip("link", "del", name, check=False)
