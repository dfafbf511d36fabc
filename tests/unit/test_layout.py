"""A keyed task's channel layout: recorded in its snapshots, refused when it changed."""

from __future__ import annotations

import pytest

from processor import Pipeline
from processor.errors import PermanentTaskFailure
from processor.jobs.graph import JobGraph
from processor.plan.stages import plan
from processor.worker.layout import (
    ChannelsChanged,
    check_history,
    check_snapshot,
    describe_change,
)


def _join_graph() -> JobGraph:
    p = Pipeline()
    views = p.source("views", value="json", timestamp=lambda v: v["ts"])
    clicks = p.source("clicks", value="json", timestamp=lambda v: v["ts"])
    pairs = views.key_by(lambda v: v["id"]).join(
        clicks.key_by(lambda c: c["view"]), within_ms=10, name="pairs"
    )
    pairs.sink("out")
    views.sink("copy")  # a source that also feeds a sink directly
    p.source("audit").sink("audit-copy")  # a source no keyed stage reads
    return JobGraph("job", plan(p))


def test_a_joins_layout_is_left_then_right_and_a_grown_left_input_is_refused() -> None:
    graph = _join_graph()
    join = graph.stage("pairs")
    before = graph.channel_layout(join, {"views": 2, "clicks": 3})
    assert before == [["views", 2], ["clicks", 3]]
    assert describe_change(before, before) is None
    # Snapshots of an older version recorded nothing: nothing to compare.
    assert describe_change(None, before) is None
    check_snapshot({}, before, 7)

    grown = graph.channel_layout(join, {"views": 4, "clicks": 3})
    with pytest.raises(ChannelsChanged) as caught:
        check_snapshot({"channels": before}, grown, 7)
    assert isinstance(caught.value, PermanentTaskFailure)
    assert caught.value.reason == "channels_changed"
    assert str(caught.value) == (
        "checkpoint 7 was taken with 2 tasks of 'views' (channels 0-1) then 3 tasks of "
        "'clicks' (channels 2-4), now 4 tasks of 'views' (channels 0-3) then 3 tasks of "
        "'clicks' (channels 4-6): its positions and watermarks per channel would be misread; "
        "the channels of a job cannot change: start a new job (another PROCESSOR_JOB_NAME) "
        "from a savepoint with --from-savepoint (`processor savepoint --last-completed` "
        "copies this job's last completed checkpoint)"
    )


def test_a_plain_keyed_stage_refuses_new_channels_too() -> None:
    """New channels would start with no position: the task would read its shuffle partition
    from offset 0, which its own purges delete (a false "records deleted" stop), and a
    running task of the old layout drops the new channels' records as malformed."""
    p = Pipeline()
    p.source("words").key_by(str).count().sink("counts")
    graph = JobGraph("job", plan(p))
    count = graph.plan.stages[1]
    before = graph.channel_layout(count, {"words": 4})
    with pytest.raises(ChannelsChanged, match=r"4 tasks of 'words' .* now 6 tasks of 'words'"):
        check_snapshot({"channels": before}, graph.channel_layout(count, {"words": 6}), 3)
    # The same numbers of another upstream stage mean other tasks.
    assert describe_change([["split", 4]], before) is not None


def test_the_coordinator_refuses_a_source_with_other_tasks_than_at_the_last_checkpoint() -> None:
    graph = _join_graph()
    tasks = ["views-0", "views-1", "clicks-0", "audit-0", "pairs-0", "pairs-1"]
    record = {"id": 12, "tasks": {t: {} for t in tasks}}
    same = {"views": 2, "clicks": 1, "audit": 1, "pairs": 2}
    assert check_history(graph, same, record) is None
    assert check_history(graph, {**same, "views": 3}, None) is None  # no checkpoint yet
    # A source that no keyed stage reads has no channels anywhere: it may grow.
    assert check_history(graph, {**same, "audit": 5}, record) is None
    assert check_history(graph, {**same, "views": 3}, record) == (
        "source topic 'views' has 3 partitions, 2 when checkpoint 12 completed: the input "
        "channels of 'pairs' would change (a snapshot holds positions and watermarks per "
        "channel); the channels of a job cannot change: start a new job (another "
        "PROCESSOR_JOB_NAME) from a savepoint with --from-savepoint (`processor savepoint "
        "--last-completed` copies this job's last completed checkpoint)"
    )
    # The right input growing is refused too: its new channels would have no position.
    assert "source topic 'clicks' has 2 partitions, 1 when" in str(
        check_history(graph, {**same, "clicks": 2}, record)
    )
    # A stage the checkpoint does not know (the pipeline changed): nothing to compare.
    assert check_history(graph, same, {"id": 3, "tasks": {"other-0": {}}}) is None
