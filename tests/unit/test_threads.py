"""processor.threads.DaemonExecutor: calls in order, cancelled on shutdown, and a call that
never returns does not keep the process from exiting (ThreadPoolExecutor's does)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from processor.threads import DaemonExecutor

# A process that queues a call which never returns, then shuts the executor down and exits.
_STUCK = """
import threading, time
from {module} import {cls}
pool = {cls}(1, "stuck-")
started = threading.Event()
pool.submit(lambda: (started.set(), time.sleep(60)))
started.wait(10)
pool.shutdown(wait=False, cancel_futures=True)
print("exiting", flush=True)
"""


def _exit_s(module: str, cls: str, timeout: float) -> float:
    began = time.monotonic()
    code = _STUCK.format(module=module, cls=cls)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr
    return time.monotonic() - began


def test_a_stuck_call_does_not_hold_up_the_exit() -> None:
    assert _exit_s("processor.threads", "DaemonExecutor", timeout=30) < 20


def test_the_executor_it_replaces_would_hold_it_up() -> None:
    # What DaemonExecutor is for: the interpreter joins ThreadPoolExecutor's threads at exit.
    with pytest.raises(subprocess.TimeoutExpired):
        _exit_s("concurrent.futures", "ThreadPoolExecutor", timeout=5)


# The same through the queue that runs a transaction's round trips (kafka/serial.py), which
# is where a stuck librdkafka call held up a stopped worker's exit.
_STUCK_SERIAL = """
import threading, time
from processor.kafka.serial import SerialCalls
calls = SerialCalls("txn-stuck")
started = threading.Event()
calls.submit("commit_transaction", 1, lambda: (started.set(), time.sleep(60)))
started.wait(10)
calls.shutdown()
print("exiting", flush=True)
"""


def test_a_stuck_transactional_call_does_not_hold_up_a_workers_exit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STUCK_SERIAL], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr


def test_calls_run_in_order_and_results_and_errors_come_back() -> None:
    pool = DaemonExecutor(1, "order")
    seen: list[int] = []
    futures = [pool.submit(seen.append, i) for i in range(50)]
    failing = pool.submit(int, "not a number")
    for future in futures:
        future.result(5)
    assert seen == list(range(50))
    with pytest.raises(ValueError):
        failing.result(5)
    pool.shutdown()


def test_shutdown_cancels_what_has_not_started_and_refuses_new_calls() -> None:
    pool = DaemonExecutor(1, "cancel")
    release = threading.Event()
    running = pool.submit(release.wait, 10)
    queued = pool.submit(lambda: 1)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    release.set()
    assert running.result(5) is True
    with pytest.raises(RuntimeError):
        pool.submit(lambda: 1)
