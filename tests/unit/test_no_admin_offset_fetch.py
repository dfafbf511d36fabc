"""No code asks the admin client for a group's committed offsets.

librdkafka's admin ListConsumerGroupOffsets dies of SIGSEGV when the answer is NOT_COORDINATOR
(librdkafka#5040): seen here as the test process crashing on a fresh broker. Offsets are read
with `processor.kafka.clients.committed_offsets` (a consumer of the group) instead."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_no_admin_list_consumer_group_offsets() -> None:
    users = [
        str(path.relative_to(ROOT))
        for folder in ("processor", "tests", "bench", "examples")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != Path(__file__).name and ".list_consumer_group_offsets(" in path.read_text()
    ]
    assert users == []
