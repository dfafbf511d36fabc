"""The processor peer's checkpoint breakdown, from control-topic records (pure logic)."""

from __future__ import annotations

from typing import Any

from bench.peers.processor_peer import breakdown


def _ack(task: str, checkpoint: int, **figures: float) -> dict[str, Any]:
    return {"kind": "ack", "task": task, "checkpoint": checkpoint, **figures}


def test_a_resent_trigger_does_not_move_the_checkpoints_start() -> None:
    # Checkpoint 7 is triggered at t=10.0 and, still pending, sent again at 10.1 and 10.2.
    messages: list[tuple[float, dict[str, Any]]] = [
        (10.0, {"kind": "trigger", "checkpoint": 7}),
        (10.1, {"kind": "trigger", "checkpoint": 7}),
        (10.2, {"kind": "trigger", "checkpoint": 7}),
        (10.25, _ack("split-0", 7, commit_s=0.02)),
        (10.3, _ack("split-1", 7, commit_s=0.03)),
        (10.6, _ack("count-0", 7, alignment_s=0.05, sync_s=0.1, upload_s=0.04, commit_s=0.01)),
    ]
    result = breakdown(messages, 0.0, 100.0)
    assert result["checkpoints"] == 1
    assert result["trigger_to_sources_committed"]["p50"] == 300.0
    assert result["sources_committed_to_keyed_committed"]["p50"] == 300.0
    assert result["trigger_to_keyed_committed"]["p50"] == 600.0
    assert result["keyed_unaccounted"]["p50"] == 100.0


def test_a_checkpoint_not_every_task_acknowledged_is_left_out() -> None:
    messages: list[tuple[float, dict[str, Any]]] = [
        (1.0, {"kind": "trigger", "checkpoint": 1}),
        (1.1, _ack("split-0", 1)),
        (1.2, _ack("count-0", 1)),
        (2.0, {"kind": "trigger", "checkpoint": 2}),
        (2.1, _ack("split-0", 2)),  # count-0 declined it
    ]
    assert breakdown(messages, 0.0, 10.0)["checkpoints"] == 1
