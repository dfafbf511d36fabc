"""The one line that names records a task needs but retention deleted."""

from __future__ import annotations

from processor.worker.gaps import INPUT_LOST, STATE_LOST, describe_gap


def test_no_gap_when_the_resume_offset_is_still_there() -> None:
    assert describe_gap("job.shuffle", 3, 1200, 1200, 17, STATE_LOST) is None
    assert describe_gap("job.shuffle", 3, 0, 1200, 17, STATE_LOST) is None


def test_gap_names_topic_partition_offsets_and_checkpoint() -> None:
    line = describe_gap("job.shuffle", 3, 5000, 1200, 17, STATE_LOST)
    assert line == (
        "job.shuffle[3] starts at 5000 but checkpoint 17 resumes at 1200: records "
        "1200-4999 were deleted (retention?); the state cannot be rebuilt exactly"
    )


def test_gap_without_a_checkpoint() -> None:
    line = describe_gap("words", 0, 10, 0, 0, INPUT_LOST)
    assert line is not None and "\n" not in line
    assert line.startswith("words[0] starts at 10 but the task (no checkpoint yet) starts at 0")
    assert "records 0-9 were deleted" in line
