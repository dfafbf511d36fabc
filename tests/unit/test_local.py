"""The restart policy of ``processor local``'s supervisor."""

from __future__ import annotations

from processor.backoff import RestartBackoff


def test_crashes_in_a_row_double_the_delay_up_to_the_cap() -> None:
    backoff = RestartBackoff(initial_s=0.5, max_s=4.0, healthy_after_s=30.0)
    now = 100.0
    delays = []
    for _ in range(6):
        start = backoff.next_start(started_at=now, exited_at=now + 1)
        delays.append(start - (now + 1))
        now = start
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_healthy_run_forgives_earlier_crashes() -> None:
    backoff = RestartBackoff(initial_s=0.5, max_s=10.0, healthy_after_s=30.0)
    backoff.next_start(0.0, 1.0)
    backoff.next_start(1.5, 2.0)
    assert backoff.next_start(3.0, 50.0) == 50.5


def test_a_second_local_job_takes_the_next_free_block_of_ports() -> None:
    """Issue #43: a second ``processor local`` stopped on 9400 in use; it now takes the
    next block of ``workers + 1`` free ports (and prints them)."""
    import contextlib
    import socket

    from processor.commands.local import free_ports

    with contextlib.closing(socket.socket()) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert free_ports(3, start=port) != port  # the block holding it is skipped
        base = free_ports(3, start=port - 1)
        assert not base <= port < base + 3
