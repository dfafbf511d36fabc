"""A worker's source threads step aside while one of its keyed tasks is in the CPU-bound
part of its checkpoint.

A worker runs its source and keyed tasks as threads of one process, under one GIL. At a high
rate the source threads never idle, and a keyed task's synchronous checkpoint step (the
epoch's flush into RocksDB and the output, the barriers, the RocksDB checkpoint) waits for the
GIL behind them: at 1.2 M words/s it took 1.01 s for 100 k pairs against 0.28 s for 79 k at
1.0 M, the checkpoints took 2.3 s and the epochs stretched to 2.35 s (91 % of the time;
`bench/experiments/epoch_phases.py`). That step is on every record's path to the output, the
sources' work is not: with the sources waiting while it runs, the step took 0.14 s at 1.2 M,
no epoch reached 1.5 s in 115 s, and the sources took in all that was sent (95.5 k lines a
second, against 91.5 k before).

A source thread checks once per consume loop (`is_set`, nothing else on the hot path) and
waits at most ``MAX_WAIT_S`` at a time, so a keyed step that blocks (its disk) cannot stall
the sources for longer than that per batch.

Example::

    with KEYED_SYNC.held():  # a keyed task's checkpoint step
        ...
    KEYED_SYNC.step_aside()  # a source task, before it consumes its next batch
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

MAX_WAIT_S = 0.5


class KeyedSyncPriority:
    """How many keyed tasks of this process are in their synchronous checkpoint step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._clear = threading.Event()
        self._clear.set()

    @contextmanager
    def held(self) -> Iterator[None]:
        """A keyed task's synchronous step: the sources wait until every such step ends."""
        with self._lock:
            self._busy += 1
            self._clear.clear()
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                if not self._busy:
                    self._clear.set()

    def step_aside(self, timeout: float = MAX_WAIT_S) -> bool:
        """For a source thread: wait while a keyed step runs (at most ``timeout``); False if
        it was still running when the wait ended."""
        if self._clear.is_set():
            return True
        return self._clear.wait(timeout)


# One per process: every task thread of a worker shares it.
KEYED_SYNC = KeyedSyncPriority()
