"""A keyed task's channel numbers must mean the same upstream tasks for as long as its state.

A keyed stage's input channels are the tasks of the stages upstream of it, in order
(`JobGraph.channel_layout`): a join's right input comes after all of its left input's tasks.
A snapshot's positions and watermarks are per channel number. When a source topic gains
partitions, its stage gains tasks: a join's right-side channels shift by the new tasks, so its
old right-side records would be read as left ones, and any keyed stage gets channels that have
no position (it would read its shuffle from the start, which its purges have deleted). No
restart can fix that, so:

- the coordinator refuses to start a job whose source stages have another number of tasks than
  at its last completed checkpoint (`check_history`), before any task runs;
- a keyed task whose snapshot was taken with another layout (`check_snapshot`, the safety net
  when no completed checkpoint tells) stops for good with one line, as for deleted records.

Both say what to do: a new job from a savepoint starts with new shuffles, so any number of
source partitions is fine there (the ones the savepoint has no position for are read from the
start).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from processor.errors import PermanentTaskFailure
from processor.jobs.graph import JobGraph, TaskId

# The snapshot metadata entry: [[upstream stage, tasks], ...] in channel order.
META_KEY = "channels"

ADVICE = (
    "the channels of a job cannot change: start a new job (another PROCESSOR_JOB_NAME) from a "
    "savepoint with --from-savepoint (`processor savepoint --last-completed` copies this job's "
    "last completed checkpoint)"
)


class ChannelsChanged(PermanentTaskFailure):
    """A snapshot whose channel numbers meant other upstream tasks than they do now."""

    reason = "channels_changed"


def describe_change(saved: Any, now: list[list[Any]]) -> str | None:
    """How ``now`` differs from a snapshot's layout ``saved``; None when they are the same,
    or when the snapshot recorded none (written by an older version: nothing to compare)."""
    if not isinstance(saved, list):
        return None
    try:
        old = [(str(name), int(tasks)) for name, tasks in saved]
    except (TypeError, ValueError):
        return None
    new = [(str(name), int(tasks)) for name, tasks in now]
    if old == new:
        return None
    return f"{_show(old)}, now {_show(new)}"


def _show(layout: list[tuple[str, int]]) -> str:
    parts, base = [], 0
    for name, tasks in layout:
        parts.append(f"{tasks} tasks of {name!r} (channels {base}-{base + tasks - 1})")
        base += tasks
    return " then ".join(parts)


def check_snapshot(meta: Mapping[str, Any], now: list[list[Any]], checkpoint: int) -> None:
    """Raise ChannelsChanged when the snapshot ``checkpoint`` was taken with another layout."""
    change = describe_change(meta.get(META_KEY), now)
    if change is not None:
        raise ChannelsChanged(
            f"checkpoint {checkpoint} was taken with {change}: its positions and watermarks "
            f"per channel would be misread; {ADVICE}"
        )


def check_history(
    graph: JobGraph, parallelism: Mapping[str, int], record: Mapping[str, Any] | None
) -> str | None:
    """The one line refusing a job whose source stages feeding a keyed stage have another
    number of tasks than at the completed checkpoint ``record`` (as the coordinator stores
    it); None when nothing changed or nothing tells."""
    if not record:
        return None
    before = collections.Counter[str]()
    for task in record.get("tasks") or {}:
        try:
            before[TaskId.parse(str(task)).stage] += 1
        except ValueError:
            continue
    for stage in graph.stages:
        readers = [s.name for s in graph.downstream(stage)]
        was, now = before.get(stage.name, 0), parallelism.get(stage.name, 0)
        if stage.source is None or not readers or not was or was == now:
            continue
        return (
            f"source topic {stage.source.topic!r} has {now} partitions, {was} when checkpoint "
            f"{record.get('id')} completed: the input channels of "
            f"{', '.join(repr(r) for r in readers)} would change (a snapshot holds positions "
            f"and watermarks per channel); {ADVICE}"
        )
    return None
