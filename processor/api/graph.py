"""`Graph`: the nodes a pipeline records, each under a stable name.

A `processor.api.streams.Pipeline` is a graph; every stream holds its graph and its node, and
adds a node (of its kind's class, `processor.api.node`) named by `Graph.named` through
`Graph.add`. A node's name is derived from the pipeline's shape (``<source topic>.<op>.<op>...``,
``-2`` for the second child of the same kind) or given with
``name=``: the name is what finds an operator's state in a snapshot again, so adding a branch
later does not rename the existing operators.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from processor.api.node import Node, SinkNode, SourceNode
from processor.errors import PipelineError

N = TypeVar("N", bound=Node)

# A stage's shuffle topic is named after its key_by: only characters Kafka allows in topics.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class Graph:
    """The nodes recorded so far, in the order they were added (parents first)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._names: set[str] = set()

    @property
    def sources(self) -> list[SourceNode]:
        return [n for n in self.nodes if isinstance(n, SourceNode)]

    @property
    def sinks(self) -> list[SinkNode]:
        return [n for n in self.nodes if isinstance(n, SinkNode)]

    def named(self, parent: Node | None, kind: type[Node], name: str | None) -> str:
        """``name``, checked, for a new node of ``kind`` after ``parent``; if None, one after
        its place (a source must be given one)."""
        if name is None and parent is not None:
            same = sum(1 for c in parent.children if c.kind == kind.kind)
            name = f"{parent.name}.{kind.kind}" + (f"-{same + 1}" if same else "")
        return self._checked(name)

    def add(self, node: N) -> N:
        """``node`` (named by `named`) into the graph, as its parent's last child."""
        if node.parent is not None:
            node.parent.children.append(node)
        self._names.add(node.name)
        self.nodes.append(node)
        return node

    def _checked(self, name: Any) -> str:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PipelineError(
                f"operator name {name!r}: use letters, digits, '.', '_' and '-' (at most 200)"
            )
        if name in self._names:
            raise PipelineError(f"operator name {name!r} is used twice")
        return name
