"""processor.worker.priority: source threads wait while a keyed checkpoint step runs."""

from __future__ import annotations

import threading
import time

from processor.worker.priority import KeyedSyncPriority


def test_nothing_held_no_wait() -> None:
    priority = KeyedSyncPriority()
    started = time.monotonic()
    assert priority.step_aside(5.0)
    assert time.monotonic() - started < 0.5


def test_a_source_waits_until_every_keyed_step_has_ended() -> None:
    priority = KeyedSyncPriority()
    first, second = priority.held(), priority.held()
    first.__enter__()
    second.__enter__()
    done = threading.Event()

    def source() -> None:
        priority.step_aside(5.0)
        done.set()

    thread = threading.Thread(target=source)
    thread.start()
    first.__exit__(None, None, None)
    assert not done.wait(0.2)  # one step still runs
    second.__exit__(None, None, None)
    assert done.wait(5.0)
    thread.join()


def test_the_wait_is_bounded_and_an_exception_releases_the_step() -> None:
    priority = KeyedSyncPriority()
    with priority.held():
        started = time.monotonic()
        assert not priority.step_aside(0.1)
        assert time.monotonic() - started < 1.0
    try:
        with priority.held():
            raise OSError("disk")
    except OSError:
        pass
    assert priority.step_aside(0.0)
