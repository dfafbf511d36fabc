"""No import cycle inside a package: its modules import each other in one direction only, so
each can be read, tested and moved from the bottom up. Every import counts, at the top of a
module or inside a function (a lazy import is how a cycle hides). In processor/ those under ``if
TYPE_CHECKING:`` count too (a helper that names ``StageChain`` in an annotation while the chain
imports it is one object split in two: issue #43); in bench/ they do not. Checked for bench/
(the whole tree) and for each package of processor/ (whose packages import only downward:
tests/unit/test_code_layout.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dotted(directory: Path) -> str:
    """The dotted name of a package directory: its parents' names as long as they are
    packages too."""
    parts = [directory.name]
    parent = directory.parent
    while (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
    """Every module under the package directory ``root``, by dotted name (a package's
    ``__init__.py`` by the package's name)."""
    base = _dotted(root)
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((base, *parts))] = path
    return found


def _runtime_nodes(tree: ast.AST, annotations: bool = False) -> Iterator[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (``annotations``: all)."""
    if annotations:
        yield from ast.walk(tree)
        return
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                yield branch
                yield from _runtime_nodes(branch)
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(
    name: str, path: Path, modules: dict[str, Path], annotations: bool = False
) -> set[str]:
    """The modules of ``modules`` that the module ``name`` at ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def nearest(dotted: str) -> str | None:
        """``dotted`` or its closest parent that is one of ``modules``."""
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in _runtime_nodes(ast.parse(path.read_text(), str(path)), annotations):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                source = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # `from package import module` imports the module; `from module import name`, the
            # module.
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                for alias in node.names
            ]
        for target in targets:
            module = nearest(target)
            if module is not None and module != name:
                found.add(module)
    return found


def import_graph(root: Path, annotations: bool = False) -> dict[str, set[str]]:
    """Which modules of the package directory ``root`` (all of its tree) each of them imports
    (``annotations``: counting those under TYPE_CHECKING)."""
    modules = _modules(root)
    return {name: _imports(name, path, modules, annotations) for name, path in modules.items()}


def import_cycles(root: Path, annotations: bool = False) -> list[list[str]]:
    """The import cycles among the modules under the package directory ``root``: each set of
    modules that import each other, round (a strongly connected component of more than one),
    sorted."""
    graph = import_graph(root, annotations)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def _packages(root: Path) -> list[Path]:
    """The packages directly under ``root``."""
    return sorted(p for p in root.iterdir() if (p / "__init__.py").exists())


def test_no_import_cycle_in_bench() -> None:
    assert import_cycles(ROOT / "bench") == []


# The packages with a cycle today, expected to fail until it is broken: none since issue #43.
_KNOWN_CYCLES: set[str] = set()


@pytest.mark.parametrize(
    "package",
    [
        pytest.param(
            package,
            id=package.name,
            marks=[pytest.mark.xfail(reason="a known import cycle: issue #43")]
            if package.name in _KNOWN_CYCLES
            else [],
        )
        for package in _packages(ROOT / "processor")
    ],
)
def test_no_import_cycle_in_a_package_of_processor(package: Path) -> None:
    assert import_cycles(package, annotations=True) == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    """The check itself: a cycle through a lazy import, a relative import and a package's
    ``__init__`` is found; an import under TYPE_CHECKING, of a parent package or from outside
    is no edge."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "def f() -> None:\n    from pkg.sub import b\n",
        "sub/__init__.py": "from . import c\n",
        "sub/b.py": "import os\nfrom .c import x\n",
        "sub/c.py": "from pkg import a\nx = 1\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n",
        "e.py": "import pkg.d\nimport pkg\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    assert import_graph(package)["pkg.sub.b"] == {"pkg.sub.c"}
    assert import_graph(package)["pkg.d"] == set()
    assert import_graph(package, annotations=True)["pkg.d"] == {"pkg.e"}
    assert import_cycles(package) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]
    # The package's __init__ joins in once something it imports imports it back.
    (package / "sub" / "c.py").write_text("from pkg import a\nimport pkg.sub\nx = 1\n")
    assert import_cycles(package) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c"]]
