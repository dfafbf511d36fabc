"""processor/api and processor/serde have no import cycle: their modules import each other in
one direction only. Every import counts: at the top, inside a function, and under ``if
TYPE_CHECKING:`` (a helper that names ``Stream`` in an annotation while streams import it is
a cycle too)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import processor

ROOT = Path(processor.__file__).parent


def _graph(package: str) -> dict[str, set[str]]:
    """Each module of ``processor.<package>`` and the modules of that package it imports."""
    modules = {}
    for path in (ROOT / package).glob("*.py"):
        name = f"processor.{package}" + ("" if path.stem == "__init__" else f".{path.stem}")
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            imported |= {t for t in targets if t in modules and t != name}
        graph[name] = imported
    return graph


@pytest.mark.parametrize("package", ["api", "serde"])
def test_no_import_cycle(package: str) -> None:
    try:
        order = list(TopologicalSorter(_graph(package)).static_order())
    except CycleError as exc:
        pytest.fail(f"processor/{package}: import cycle {' -> '.join(exc.args[1])}")
    assert len(order) > 3


def test_a_cycle_is_found() -> None:
    """The check sees a cycle through an annotation-only import."""
    graph = _graph("api")
    graph["processor.api.node"].add("processor.api.streams")
    with pytest.raises(CycleError):
        list(TopologicalSorter(graph).static_order())
