"""The shape of the code: packages of `processor/` import only downward, and no module grows
past 500 lines (a module that does one job fits)."""

from __future__ import annotations

import ast
from pathlib import Path

import processor

ROOT = Path(processor.__file__).parent
MAX_LINES = 500
MAX_FUNCTION_LINES = 80

# From the bottom up; a package or top-level module may import its own layer and those below.
LAYERS: list[set[str]] = [
    {
        "config",
        "errors",
        "topics",
        "logs",
        "health",
        "faults",
        "backoff",
        "processes",
        "maven",
        "http_server",
        "endpoints",
        "metrics",
        "worker_hosts",
        "redact",
        "threads",
        "storage_location",
    },
    {"models"},
    {"serde"},
    {"api"},
    {"plan"},
    {"engine"},
    {"jobs"},
    {"testing", "testing_tasks"},
    {"checkpointing"},
    {"state"},
    {"kafka"},
    {"localkafka"},
    {"sinks"},
    {"query"},
    {"worker"},
    {"coordinator"},
    {"commands"},
    {"cli", "__main__", "__init__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _unit(path: Path) -> str:
    """The package (or top-level module) of ``processor/`` that ``path`` belongs to."""
    return path.relative_to(ROOT).with_suffix("").parts[0]


def _imported_units(path: Path) -> set[str]:
    """The units of ``processor/`` that ``path`` imports, at the top or inside a function."""
    units: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "processor":
                modules = [f"processor.{alias.name}" for alias in node.names]
            else:
                modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "processor" and len(parts) > 1:
                units.add(parts[1])
    return units


def test_every_unit_has_a_layer() -> None:
    units = {_unit(path) for path in ROOT.rglob("*.py")}
    assert units - LAYER.keys() == set(), "give the new package or module a layer in LAYERS"


def test_no_import_runs_upward() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        unit = _unit(path)
        for imported in _imported_units(path):
            if imported in LAYER and LAYER[imported] > LAYER.get(unit, len(LAYERS)):
                upward.append(f"{path.relative_to(ROOT.parent)} imports processor.{imported}")
    assert upward == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT.parent)): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_function_is_over_80_lines() -> None:
    """A function that does one thing fits a screen (issue #43)."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                    long.append(f"{where} {node.name} {lines}")
    assert long == []


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    """The check sees imports inside functions too (a lazy import is still a dependency)."""
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from processor.runtime import worker\n    return worker\n")
    assert _imported_units(module) == {"runtime"}
