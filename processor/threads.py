"""An executor whose threads never hold up the process's exit.

`concurrent.futures.ThreadPoolExecutor` joins its threads when the interpreter exits, even
after ``shutdown(wait=False)`` (its ``_python_exit`` hook): a call blocked in librdkafka (a
transactional call past its own timeout, librdkafka#5456) kept a worker that had logged
"stopped" alive until the call returned, 30 s and more after a SIGTERM. Here the threads are
daemons: a stopped process exits at once, and whatever a stuck call was doing is abandoned
with it, as it would be after a SIGKILL.

>>> from processor.threads import DaemonExecutor
>>> pool = DaemonExecutor(1, "example")
>>> pool.submit(sum, [1, 2, 3]).result()
6
>>> pool.shutdown()
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Job = tuple[Future[Any], Callable[[], Any]]


class DaemonExecutor(Executor):
    """Up to ``threads`` daemon threads named ``<name>-<n>``, started as calls come; calls run
    in the order submitted (one thread: one after another)."""

    def __init__(self, threads: int, name: str) -> None:
        self._max = threads
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError(f"{self._name}: cannot run calls after shutdown")
            self._jobs.put((future, functools.partial(fn, *args, **kwargs)))
            if len(self._threads) < self._max:
                name = f"{self._name}-{len(self._threads)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """As `Executor.shutdown`; with ``wait`` it joins the threads, which a call stuck in
        one of them holds up, so callers that must not hang pass ``wait=False``."""
        with self._lock:
            self._shut = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in threads:
            self._jobs.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, call = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:  # noqa: BLE001 - the caller's to handle, as in Executor
                future.set_exception(exc)
            else:
                future.set_result(result)
