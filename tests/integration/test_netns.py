"""The test network of the partition faults (tests/netns.py): a cut host is unreachable both
ways until healed, silently, and a connection made before survives the cut; a command run
inside a host gets the harness's signals.

The partitions themselves are faults of the chaos run on three brokers: a worker cut off (a
zombie whose tasks move, fenced once healed) and a broker cut off (its leaderships move),
in CI by ``tests/integration/test_chaos.py::test_chaos_short_on_three_brokers`` and at
length by ``python -m tests.chaos --brokers 3 --netns`` (tests/network_faults.py).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import netns
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WORKERS = 3
SKIP = netns.available()


@pytest.fixture(scope="module")
def network() -> Iterator[netns.TestNetwork]:
    if SKIP:
        pytest.skip(f"no network namespaces here: {SKIP}")
    with netns.TestNetwork() as net:
        for i in range(1, 4):
            net.add_host(f"k{i}")
        for i in range(WORKERS):
            net.add_host(f"w{i}")
        yield net


def _connects(address: str, port: int, prefix: list[str] | None = None, wait: float = 5) -> bool:
    """Whether a TCP connect to ``address:port`` succeeds within ``wait`` seconds, from the
    root namespace or, with ``prefix``, from inside a host."""
    if prefix is None:
        try:
            with socket.create_connection((address, port), timeout=wait):
                return True
        except OSError:
            return False
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout={wait})"
    done = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, check=False)
    return done.returncode == 0


def test_a_cut_host_is_unreachable_until_healed(network: netns.TestNetwork) -> None:
    """cut() stops traffic both ways, from the root namespace and from another host; heal()
    restores it, and a connection made before the cut survives it."""
    target, other = network.hosts["w0"], network.hosts["w1"]
    server = subprocess.Popen(
        [
            *target.prefix,
            sys.executable,
            "-c",
            "import socket, sys\n"
            "s = socket.create_server((sys.argv[1], 7777))\n"
            "while True:\n"
            "    c, _ = s.accept()\n"
            "    c.sendall(c.recv(16))\n"
            "    c.close()\n",
            target.address,
        ]
    )
    try:
        wait_until(lambda: _connects(target.address, 7777), 10, "the probe server")
        before = socket.create_connection((target.address, 7777), timeout=2)
        assert _connects(target.address, 7777, other.prefix)
        network.cut(target)
        try:
            started = time.monotonic()
            assert not _connects(target.address, 7777, wait=2), "the root namespace got through"
            assert time.monotonic() - started >= 1.9, "refused rather than silently dropped"
            assert not _connects(target.address, 7777, other.prefix, 2), "a host got through"
            assert not _connects(network.hosts["w2"].address, 22, target.prefix, 2)
        finally:
            network.heal(target)
        before.sendall(b"still")
        before.settimeout(10)
        assert before.recv(16) == b"still"
        before.close()
        assert _connects(target.address, 7777)
        assert _connects(target.address, 7777, other.prefix)
    finally:
        server.kill()
        server.wait(10)


def _argv0(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


def _state(pid: int) -> str:
    """The one-letter state of process ``pid`` (R, S, T for stopped...)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def test_signals_reach_a_command_run_inside_a_host(network: netns.TestNetwork) -> None:
    """``ip netns exec`` execs: the pid a prefixed Popen returns is the command's own, in the
    host's namespace, so the harness's SIGSTOP, SIGCONT and SIGKILL of a worker reach it."""
    host = network.hosts["w2"]
    proc = subprocess.Popen([*host.prefix, sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # Until the exec: then the command line is the command's, not ip's.
        wait_until(lambda: _argv0(proc.pid) == sys.executable, 10, "the exec of the command")
        inside = subprocess.run(
            ["ip", "netns", "identify", str(proc.pid)], capture_output=True, text=True, check=True
        )
        assert inside.stdout.strip() == host.netns
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(proc.pid) == "T", 5, "the command to stop")
        proc.send_signal(signal.SIGCONT)
        wait_until(lambda: _state(proc.pid) != "T", 5, "the command to continue")
        proc.kill()
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
