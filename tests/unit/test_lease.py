"""The coordinator lease's decision (processor/runtime/lease.py), over every case."""

from __future__ import annotations

import itertools

import pytest

from processor.models.control import Lease, decode, encode
from processor.runtime.lease import EXPIRE_S, Seen, conflict_line, decide


def test_no_other_coordinator_or_an_expired_lease_is_taken_at_once() -> None:
    assert decide(None, False, 0.0) == "take"
    assert decide(Seen("old", EXPIRE_S), False, 0.0) == "take"
    assert decide(Seen("old", EXPIRE_S * 10), True, 0.0) == "take"  # its renewals are stale


def test_a_recent_lease_is_watched_until_it_expires() -> None:
    seen = Seen("other", 0.4)
    assert decide(seen, False, 0.0) == "watch"
    assert decide(seen, False, EXPIRE_S - 0.01) == "watch"
    assert decide(seen, False, EXPIRE_S) == "take"  # dead or hung: fenced by the take-over


def test_a_renewal_while_watching_is_a_live_coordinator() -> None:
    assert decide(Seen("other", 0.4), True, 0.2) == "conflict"


@pytest.mark.parametrize(
    ("age", "renewed", "watched"),
    list(itertools.product([0.0, 1.0, EXPIRE_S - 0.1, EXPIRE_S], [False, True], [0.0, 2.0, 9.9])),
)
def test_every_case_ends_in_one_of_three_and_never_takes_a_live_lease(
    age: float, renewed: bool, watched: float
) -> None:
    verdict = decide(Seen("other", age), renewed, watched)
    assert verdict in ("take", "watch", "conflict")
    if age < EXPIRE_S and renewed:
        assert verdict == "conflict"


def test_the_lines_name_the_job_and_the_fix() -> None:
    line = conflict_line("orders", "abc123", fenced=False)
    assert "job orders already has a running coordinator (incarnation abc123" in line
    assert "PROCESSOR_JOB_NAME" in line and "\n" not in line
    assert "took over (this one was fenced)" in conflict_line("orders", "", fenced=True)


def test_lease_messages_round_trip() -> None:
    lease = Lease("abc", 1_796_000_000.25)
    assert decode(encode(lease)) == lease
    assert decode(b'{"kind":"lease","incarnation":"abc","renewed_at":"now"}') is None
