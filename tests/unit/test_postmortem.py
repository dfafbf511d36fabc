"""tests/postmortem.py: a kept run's committed updates per word, from dump lines."""

from __future__ import annotations

from tests.postmortem import breaks, committed_updates


def _batch(producer: int, epoch: int, control: bool = False) -> str:
    return (
        f"baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 "
        f"producerId: {producer} producerEpoch: {epoch} partitionLeaderEpoch: 0 "
        f"isTransactional: true isControl: {str(control).lower()} position: 0"
    )


def _record(offset: int, key: str, value: int) -> str:
    return (
        f"| offset: {offset} CreateTime: 1 keySize: {len(key)} valueSize: 2 sequence: 0 "
        f"headerKeys: [] key: {key} payload: {value}"
    )


def _marker(offset: int, kind: str) -> str:
    return f"| offset: {offset} CreateTime: 1 keySize: 4 valueSize: 6 endTxnMarker: {kind}"


def test_only_committed_updates_count_and_a_repeat_is_a_break() -> None:
    """Producer 1 commits 3, producer 2's 4 is aborted, producer 1's next epoch commits 3
    again (a replayed epoch) and then 5: the updates are 3, 3, 5 with a break at the repeat;
    producer 2's next commit does not bring its aborted record back."""
    lines = [
        _batch(1, 0),
        _record(0, "w", 3),
        _batch(2, 0),
        _record(1, "w", 4),
        _batch(1, 0, control=True),
        _marker(2, "COMMIT"),
        _batch(2, 0, control=True),
        _marker(3, "ABORT"),
        _batch(1, 1),
        _record(4, "w", 3),
        _record(5, "w", 5),
        _batch(1, 1, control=True),
        _marker(6, "COMMIT"),
        _batch(1, 1),
        _record(7, "w", 9),  # left open: not committed
        _batch(2, 0),
        _record(8, "v", 1),  # producer 2's next transaction commits: not its aborted 4
        _batch(2, 0, control=True),
        _marker(9, "COMMIT"),
    ]
    updates = committed_updates(lines)
    assert [(u.value, u.offset, u.epoch) for u in updates["w"]] == [(3, 0, 0), (3, 4, 1), (5, 5, 1)]
    assert breaks(updates["w"]) == [1]
    assert [(u.value, u.offset) for u in updates["v"]] == [(1, 8)]
