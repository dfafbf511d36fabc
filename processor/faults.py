"""Named crash points, so that tests can kill a process at the exact step they want to test.

Armed only through the environment, read once at import::

    PROCESSOR_FAULT=<point>[@<task>][#<n>][:stop|:term]

kills this process with SIGKILL the ``n``-th time (default: the first) ``<point>`` is reached,
by ``<task>`` when one is named. With ``:stop`` it stops it there instead (SIGSTOP): a zombie
frozen at that very step, which a test continues (SIGCONT) once its tasks have moved, to see
it fenced. With ``:term`` it asks it to stop there (SIGTERM): a clean stop that begins at
that very step. Unarmed, ``reach()`` is one comparison. A helper process that
runs a step for a worker (`serve`) kills that worker first, so a point means the same process
wherever its step runs.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

POINTS = {
    "barrier_aligned": "a keyed task aligned barrier n, before its snapshot",
    "snapshot_uploading": "the local snapshot exists, its copy to checkpoint storage is not done",
    "snapshot_durable": "the snapshot is durable, the transaction is not committed",
    "offsets_sent": "send_offsets_to_transaction done, commit_transaction not",
    "committed": "the transaction is committed, the acknowledgement not sent",
    "postgres_prepared": "a PostgreSQL sink's transaction is prepared, Kafka's not committed",
    "postgres_committing": "Kafka's transaction is committed, the PostgreSQL one still prepared",
    "coordinator_recorded": "the coordinator recorded a completed checkpoint, told nobody",
    "restoring": "a task is copying its snapshot back from checkpoint storage",
}


class _Armed:
    def __init__(self, spec: str) -> None:
        spec, _, action = spec.partition(":")
        actions = {"": signal.SIGKILL, "stop": signal.SIGSTOP, "term": signal.SIGTERM}
        if action not in actions:
            raise ValueError(f"PROCESSOR_FAULT: unknown action {action!r} (:stop or :term)")
        self.signal = actions[action]
        spec, _, count = spec.partition("#")
        self.point, _, self.task = spec.partition("@")
        if self.point not in POINTS:
            raise ValueError(f"PROCESSOR_FAULT: unknown fault point {self.point!r}")
        self.remaining = int(count or 1)


_armed = _Armed(os.environ["PROCESSOR_FAULT"]) if os.environ.get("PROCESSOR_FAULT") else None
_served: int | None = None  # the worker this (helper) process runs steps for


def serve(pid: int) -> None:
    """This process runs steps for process ``pid``: a fault reached here kills it too."""
    global _served
    _served = pid


def reach(point: str, task: str = "") -> None:
    if _armed is None or point != _armed.point or (_armed.task and task != _armed.task):
        return
    _armed.remaining -= 1
    if _armed.remaining > 0:
        return
    sig = _armed.signal
    by = f" by {task}" if task else ""
    log.critical("fault point %s reached%s: %s", point, by, signal.Signals(sig).name)
    for handler in logging.getLogger().handlers:
        handler.flush()
    if _served is not None:
        os.kill(_served, sig)
    os.kill(os.getpid(), sig)
