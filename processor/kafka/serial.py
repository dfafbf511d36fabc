"""Blocking calls run one after another on a background thread, each under a deadline.

A task hands its transaction's round trips (send the offsets, commit) to this queue and keeps
processing the next epoch while they are in flight; it waits only when it must, before it
writes into the next transaction. The queue keeps the order of the calls, and once a call
fails every later one is skipped: a commit must never run after its offsets failed to go in.

A call that does not return is a failure too: librdkafka can block in a transactional call
past its own timeout (librdkafka#5456, #5511), so each call gets its timeout plus a grace,
after which the queue is *stuck* and the task fails.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

from processor.threads import DaemonExecutor


class CallStuck(RuntimeError):
    """A call outlived its deadline: whatever it was doing cannot be trusted any more."""


class EarlierCallFailed(RuntimeError):
    """Not run, because a call queued before it failed."""


@dataclass
class _Call:
    what: str
    limit: float  # seconds it may run before it counts as stuck
    future: Future[Any] = field(default_factory=Future)
    started: float | None = None


class SerialCalls:
    def __init__(self, name: str, grace: float = 5.0) -> None:
        self.name = name
        self.grace = grace
        self.stuck = False
        self.waited_s = 0.0  # time callers spent in settle() waiting for queued calls
        # A daemon thread: a call stuck past its deadline never holds up the process's exit.
        self._executor = DaemonExecutor(1, name)
        self._queue: deque[_Call] = deque()
        self._failed = False  # written by the worker thread only

    @property
    def pending(self) -> bool:
        """Calls queued whose outcome nobody has collected yet (done or not)."""
        return bool(self._queue)

    def submit(self, what: str, timeout: float, call: Callable[[], object]) -> None:
        entry = _Call(what, timeout + self.grace)

        def run() -> object:
            if self._failed:
                raise EarlierCallFailed(f"{what} of {self.name} skipped: an earlier call failed")
            entry.started = time.monotonic()
            try:
                return call()
            except BaseException:
                self._failed = True
                raise

        entry.future = self._executor.submit(run)
        self._queue.append(entry)

    def poll(self) -> bool:
        """True once every queued call has succeeded; raises the first failure."""
        while self._queue:
            head = self._queue[0]
            if not head.future.done():
                self._check_deadline(head)
                return False
            self._collect()
        return True

    def settle(self) -> None:
        """Wait until every queued call has succeeded; raises the first failure."""
        if not self._queue:
            return
        began = time.monotonic()
        try:
            while self._queue:
                head = self._queue[0]
                while not head.future.done():
                    self._check_deadline(head)
                    if head.started is None:  # the one before it just finished
                        wait([head.future], 0.01, FIRST_COMPLETED)
                    else:
                        left = head.started + head.limit - time.monotonic()
                        wait([head.future], max(0.0, left), FIRST_COMPLETED)
                self._collect()
        finally:
            self.waited_s += time.monotonic() - began

    def shutdown(self) -> None:
        # Never joins: a stuck call would hold the caller forever.
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _collect(self) -> None:
        head = self._queue.popleft()
        head.future.result()  # raises what the call raised

    def _check_deadline(self, head: _Call) -> None:
        if head.started is not None and time.monotonic() - head.started > head.limit:
            self.stuck = True
            raise CallStuck(f"{head.what} of {self.name} did not return within {head.limit:.0f}s")
