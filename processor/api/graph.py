"""`Graph`: the nodes a pipeline records, each under a stable name.

A `processor.api.streams.Pipeline` is a graph; every stream holds its graph and its node, and
adds a child node through `Graph.child`. A node's name is derived from the pipeline's shape
(``<source topic>.<op>.<op>...``, ``-2`` for the second child of the same kind) or given with
``name=``: the name is what finds an operator's state in a snapshot again, so adding a branch
later does not rename the existing operators.
"""

from __future__ import annotations

import re
from typing import Any

from processor.api.node import Node
from processor.errors import PipelineError

# A stage's shuffle topic is named after its key_by: only characters Kafka allows in topics.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class Graph:
    """The nodes recorded so far, in the order they were added (parents first)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._names: set[str] = set()

    @property
    def sources(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "source"]

    @property
    def sinks(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "sink"]

    def root(self, kind: str, name: str, **attrs: Any) -> Node:
        """A node with no parent (a source) named ``name``."""
        node = Node(kind, self._checked(name), None, keyed=False, **attrs)
        self._add(node)
        return node

    def child(self, parent: Node, kind: str, name: str | None, keyed: bool, **attrs: Any) -> Node:
        """A node of ``kind`` after ``parent``, named ``name`` or after its place."""
        if name is None:
            same = sum(1 for c in parent.children if c.kind == kind)
            name = f"{parent.name}.{kind}" + (f"-{same + 1}" if same else "")
        node = Node(kind, self._checked(name), parent, keyed=keyed, **attrs)
        parent.children.append(node)
        self._add(node)
        return node

    def _checked(self, name: Any) -> str:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PipelineError(
                f"operator name {name!r}: use letters, digits, '.', '_' and '-' (at most 200)"
            )
        if name in self._names:
            raise PipelineError(f"operator name {name!r} is used twice")
        return name

    def _add(self, node: Node) -> None:
        self._names.add(node.name)
        self.nodes.append(node)
