"""``processor local``: the coordinator and N workers as child processes on this machine.

A worker that dies is started again (as a supervisor such as Kubernetes would), so killing
one shows recovery; Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "processor", *args], env=env)


def run_local(
    workers: int,
    env_overrides: dict[str, str],
    stop: threading.Event,
    until_idle: bool = False,
    metrics_port: int = 0,
) -> int:
    env = {**os.environ, **env_overrides}

    def child_env(port: int) -> dict[str, str]:
        return {**env, "PROCESSOR_METRICS_PORT": str(port)} if metrics_port else env

    coordinator_args = ["coordinator", *(["--exit-when-idle"] if until_idle else [])]
    coordinator = _spawn(
        coordinator_args, {**child_env(metrics_port), "PROCESSOR_EXPECTED_WORKERS": str(workers)}
    )
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start_worker(i: int) -> None:
        name = f"worker-{i}"
        port = metrics_port + 1 + i if metrics_port else 0
        procs[name] = _spawn(["worker", "--worker-id", name], child_env(port))

    for i in range(workers):
        start_worker(i)
    if metrics_port:
        urls = [f"http://127.0.0.1:{metrics_port + i}/metrics" for i in range(workers + 1)]
        log.info("status page: http://127.0.0.1:%d/ (JSON: /api/status)", metrics_port)
        log.info("metrics: %s", " ".join(urls))
    code = 0
    try:
        while not stop.is_set():
            status = coordinator.poll()
            if status is not None:
                code = status
                if status != 0:
                    log.error("coordinator exited with %d", status)
                break
            for i in range(workers):
                name = f"worker-{i}"
                status = procs[name].poll()
                if status == 2:  # a configuration error: a restart would only repeat it
                    log.error("%s exited with 2 (see its error above): stopping", name)
                    code = 2
                    stop.set()
                elif status is not None:
                    log.warning("%s exited with %s: starting it again", name, status)
                    start_worker(i)
            stop.wait(0.2)
    finally:
        everyone = [coordinator, *procs.values()]
        for proc in everyone:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in everyone:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
    return code
