"""``processor local``: the coordinator and N workers as child processes on this machine.

A child that dies is started again after a back-off (as a supervisor such as Kubernetes
would), the coordinator as much as a worker: a restarted coordinator resumes its checkpoint
ids from the control topic, so killing either shows recovery. Only exit code 2 (a
configuration error, which a restart would only repeat) ends the job, and so does the
coordinator's exit 0 under ``--until-idle`` (all input done). Ctrl-C stops everything cleanly.

With ``PROCESSOR_ON_ERROR=stop`` a task that fails on a record stops (its worker keeps it
stopped, it does not crash), and the coordinator, told so by the worker's heartbeat, exits
with 3 (``EXIT_STOPPED``): the job ends, and ``processor local`` exits 1. Run again, it reads
that record again and stops the same way: never a restart loop.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from processor.backoff import RestartBackoff

log = logging.getLogger(__name__)

EXIT_CONFIG_ERROR = 2
EXIT_STOPPED = 3  # the coordinator's: a task stopped on a failing record (PROCESSOR_ON_ERROR)
EXIT_FAILED = 1  # processor local's, then


class _Child:
    """One supervised child process: started, watched, restarted after its back-off."""

    def __init__(self, name: str, args: list[str], env: dict[str, str]) -> None:
        self.name = name
        self._args = args
        self._env = env
        self._backoff = RestartBackoff()  # a crashed service: 0.5 s, doubling to 10 s
        self._restart_at: float | None = None
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._started_at = time.monotonic()
        return subprocess.Popen([sys.executable, "-m", "processor", *self._args], env=self._env)

    def poll(self, now: float) -> int | None:
        """The exit status the first time the child is seen dead; restarts it when due."""
        if self._restart_at is not None:
            if now >= self._restart_at:
                self._restart_at = None
                self.proc = self._spawn()
            return None
        status = self.proc.poll()
        if status is not None:
            self._restart_at = self._backoff.next_start(self._started_at, now)
        return status

    def schedule_restart(self) -> None:
        log.warning(
            "%s exited with %s: starting it again in %.1fs",
            self.name,
            self.proc.returncode,
            max(0.0, (self._restart_at or 0) - time.monotonic()),
        )


def free_ports(count: int, start: int = 9400, host: str = "127.0.0.1", tries: int = 50) -> int:
    """The first of ``count`` consecutive ports free on ``host``, from ``start`` up in steps
    of ``count`` (9400 for the first job on a machine): a second ``processor local`` beside
    the first takes the next block rather than failing on 9400."""
    for base in range(start, start + count * tries, count):
        if all(_free(host, port) for port in range(base, base + count)):
            return base
    raise OSError(f"no {count} free consecutive ports on {host} from {start} up")


def _free(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def run_local(
    workers: int,
    env_overrides: dict[str, str],
    stop: threading.Event,
    until_idle: bool = False,
    metrics_port: int = 0,
    drain: bool = False,
) -> int:
    env = {**os.environ, **env_overrides}

    def child_env(port: int) -> dict[str, str]:
        return {**env, "PROCESSOR_METRICS_PORT": str(port)} if metrics_port else env

    coordinator = _Child(
        "coordinator",
        [
            "coordinator",
            "--exit-when-stopped",
            *(["--exit-when-idle"] if until_idle else []),
            *(["--drain"] if until_idle and drain else []),
        ],
        {**child_env(metrics_port), "PROCESSOR_EXPECTED_WORKERS": str(workers)},
    )
    children = [coordinator]
    for i in range(workers):
        port = metrics_port + 1 + i if metrics_port else 0
        children.append(
            _Child(f"worker-{i}", ["worker", "--worker-id", f"worker-{i}"], child_env(port))
        )
    if metrics_port:
        urls = [f"http://127.0.0.1:{metrics_port + i}/metrics" for i in range(workers + 1)]
        log.info("status page: http://127.0.0.1:%d/ (JSON: /api/status)", metrics_port)
        log.info("metrics: %s", " ".join(urls))
    code = 0
    try:
        while not stop.is_set():
            now = time.monotonic()
            for child in children:
                status = child.poll(now)
                if status is None:
                    continue
                if status == EXIT_CONFIG_ERROR:
                    log.error("%s exited with 2 (see its error above): stopping", child.name)
                    code = EXIT_CONFIG_ERROR
                    stop.set()
                elif status == EXIT_STOPPED and child is coordinator:
                    log.error("a task stopped on a failing record (see its error above): stopping")
                    code = EXIT_FAILED
                    stop.set()
                elif status == 0 and child is coordinator and until_idle:
                    stop.set()  # every input record is committed: the job is done
                else:
                    child.schedule_restart()
            stop.wait(0.2)
    finally:
        everyone = [child.proc for child in children]
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


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", type=int, default=2, help="worker processes to run (default: 2)"
    )
    parser.add_argument("--until-idle", action="store_true", help="stop once all input is done")
    parser.add_argument(
        "--drain",
        action="store_true",
        help="with --until-idle: end event time once the input is done, so that every window "
        "and event-time timer fires before the job stops (as Flink's stop --drain; a drained "
        "job's later input is late)",
    )


def run(args: argparse.Namespace) -> int:
    """``processor local``: a coordinator and ``--workers`` workers."""
    from processor.commands import base
    from processor.jobs import load_graph

    settings = base.setup(args)
    load_graph(settings)  # a pipeline that cannot run fails here, before any process starts
    # Metrics and the status page are on by default here: 9400 and up (the next free
    # block beside another job), unless set.
    port = settings.metrics_port
    if args.metrics_port is None and "PROCESSOR_METRICS_PORT" not in os.environ:
        port = free_ports(args.workers + 1, host=settings.metrics_host)
    env = base.child_env(args)
    if args.drain and not args.until_idle:
        print("processor local: --drain needs --until-idle", file=sys.stderr)
        return 2
    return run_local(args.workers, env, base.stop_event(), args.until_idle, port, args.drain)
