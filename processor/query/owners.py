"""Queryable state, the pure part: which operator a name means, which task owns a key, and the
worker's registry of its tasks' gates (`processor.state.query_gate`). The HTTP routes are in
`processor.query.routes`.

A key is asked for as a sink shows it, ``str(key)``; the state holds it by its ``key_text``
(`processor.api.ops`): a plain string is itself, anything else NUL + canonical JSON. So
``"5"`` may mean the string or the int: both are tried (`key_candidates`), the string first.
The task that owns a key text is the shuffle's choice, `shuffle_partition` of its UTF-8 bytes.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processor.api.node import PerKeyNode, Stateful, WindowNode
from processor.api.ops import TAGGED, key_of, key_text
from processor.jobs.graph import JobGraph
from processor.models.partitioners import Placement
from processor.models.records import shuffle_partition
from processor.plan.stages import Stage
from processor.serde.codec import RecordError
from processor.state.query_gate import TaskGate

MAX_LIMIT = 1000  # items of one scan: a request must not hold a task's gate for long
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Operator:
    """A queryable operator: its node and the keyed stage that runs it."""

    node: Stateful
    stage: Stage

    @property
    def window(self) -> WindowNode | None:
        """The window it runs per, if any."""
        return self.node.window if isinstance(self.node, PerKeyNode) else None

    @property
    def windowed(self) -> bool:
        return self.window is not None

    def prefix(self) -> bytes:
        """Its keys' prefix in the store (`processor.engine.state_keys`)."""
        return f"{self.node.name}\0".encode()


def operators(graph: JobGraph) -> dict[str, Operator]:
    """Every stateful operator of the pipeline by name (a join, a process, an aggregation).

    Example: ``operators(graph)["counts"].stage.name == "count"``
    """
    # A keyed source's if its keys are text: its producers' partitioner hashed their bytes.
    stages = [s for s in graph.stages if s.keyed_source is None or _text_keys(s)]
    return {n.name: Operator(n, s) for s in stages for n in s.stateful}


def _text_keys(stage: Stage) -> bool:
    return stage.source is not None and stage.source.key_format == "text"


def stage_sizes(tasks: Iterable[str]) -> dict[str, int]:
    """Tasks per stage, of an assignment's task ids (``<stage>-<index>``): a keyed
    source's stage has one per partition of its topic."""
    sizes: dict[str, int] = {}
    for task in tasks:
        stage, _, index = task.rpartition("-")
        if index.isdecimal():
            sizes[stage] = sizes.get(stage, 0) + 1
    return sizes


def partitions_of(operator: Operator, shuffle_partitions: int, sizes: Mapping[str, int]) -> int:
    """How many tasks the operator's stage has: its shuffle's partitions, or a keyed
    source's topic's (as many as ``sizes``, the assignment's, says)."""
    if operator.stage.keyed_source is None:
        return shuffle_partitions
    return max(1, sizes.get(operator.stage.name, 0))


def key_candidates(shown: str) -> list[str]:
    """The key texts a key shown as ``shown`` (``str(key)``, as in a sink) may have.

    Examples::

        key_candidates("apple") == ["apple"]
        key_candidates("5") == ["5", "\\x005"]          # the string "5", or the int 5
        key_candidates("[1, 2]") == ["[1, 2]", "\\x00[1,2]"]
    """
    found = [shown] if not shown.startswith(TAGGED) else []
    try:
        literal = ast.literal_eval(shown)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return found
    try:
        if isinstance(literal, str) or str(literal) != shown:
            return found  # "'a'" is not how a sink shows the key 'a'
        text = key_text(literal)
    except (RecordError, ValueError):  # ValueError: an int of more than 4,300 digits
        return found
    return [*found, text] if text not in found else found


def split_window(shown: str) -> tuple[str, int] | None:
    """A windowed key ``<key>@<window start>`` as (key, start); None if it is not one.

    Example: ``split_window("apple@60000") == ("apple", 60000)``
    """
    key, sep, start = shown.rpartition("@")
    if not sep or not start.lstrip("-").isdigit():
        return None
    return key, int(start)


def owner(operator: Operator, text: str, partitions: int) -> str:
    """The task that holds the state of key text ``text``: the shuffle's partition of it;
    of a keyed source, the partition its producers' partitioner gives the key's bytes.

    Example: ``owner(op, "apple", 4) == f"{op.stage.name}-{zlib.crc32(b'apple') % 4}"``
    """
    local = operator.stage.keyed_source
    if local is not None and local.local is not None:
        key = key_of(text)
        raw = (key if isinstance(key, str) else text).encode()
        return f"{operator.stage.name}-{Placement(local.local, partitions).of(raw)}"
    return f"{operator.stage.name}-{shuffle_partition(text.encode(), partitions)}"


def stage_tasks(operator: Operator, partitions: int) -> list[str]:
    """Every task of the operator's stage: one per shuffle partition.

    Example: ``stage_tasks(op, 2) == ["count-0", "count-1"]``
    """
    return [f"{operator.stage.name}-{p}" for p in range(partitions)]


def key_tasks(operator: Operator, shown: str, partitions: int) -> list[str] | None:
    """The tasks that may hold a key shown as ``shown``, in the order its key texts are tried
    (`key_candidates`); None: a windowed operator's key without ``@<window start>``.

    Example: ``key_tasks(counts, "apple", 4) == [owner(counts, "apple", 4)]``
    """
    if operator.windowed:
        split = split_window(shown)
        if split is None:
            return None
        shown = split[0]
    found: list[str] = []
    for text in key_candidates(shown):
        task_id = owner(operator, text, partitions)
        if task_id not in found:
            found.append(task_id)
    return found


class QueryRegistry:
    """The gates of a worker's keyed tasks, and which tasks the assignment gives it.

    Thread-safe: the worker's loop registers and drops, request threads look up.
    """

    def __init__(self, graph: JobGraph, partitions: int) -> None:
        self.operators = operators(graph)
        self.partitions = partitions
        self._lock = threading.Lock()
        self._gates: dict[str, TaskGate] = {}
        self._owners: dict[str, str] = {}  # task -> worker id, as assigned
        self._sizes: dict[str, int] = {}  # stage -> its tasks, as assigned

    def gate(self, task_id: str) -> TaskGate:
        """A new gate for a (re)started task, in place of any earlier one."""
        gate = TaskGate(task_id)
        with self._lock:
            self._gates[task_id] = gate
        return gate

    def assigned(self, owners: dict[str, str], mine: Iterable[str]) -> None:
        """The current assignment (task -> worker) and this worker's share of it: the gates
        of tasks that moved away are forgotten."""
        keep = set(mine)
        with self._lock:
            self._owners = dict(owners)
            self._sizes = stage_sizes(owners)
            for task_id in self._gates.keys() - keep:
                del self._gates[task_id]

    def find(self, task_id: str) -> TaskGate | str | None:
        """The task's gate here; else the worker it is assigned to (a str), or None."""
        with self._lock:
            gate = self._gates.get(task_id)
            return gate if gate is not None else self._owners.get(task_id)

    def partitions_of(self, operator: Operator) -> int:
        """How many tasks the operator's stage has (`partitions_of`)."""
        with self._lock:
            return partitions_of(operator, self.partitions, self._sizes)

    def tasks_of(self, operator: Operator) -> list[str]:
        """Every task of the operator's stage."""
        return stage_tasks(operator, self.partitions_of(operator))
