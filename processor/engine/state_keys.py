"""Where an operator's state lives in the task's store: ``<operator name>\0<key text>``."""

from __future__ import annotations

from processor.api.streams import Node


def state_key(node: Node, text: str) -> bytes:
    """The store key of ``node``'s state for the key whose text is ``text``."""
    return f"{node.name}\0{text}".encode()


def state_prefix(node: Node) -> bytes:
    """``state_key(node, text) == state_prefix(node) + text.encode()``."""
    return f"{node.name}\0".encode()
