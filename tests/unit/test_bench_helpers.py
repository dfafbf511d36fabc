"""No helper is written twice in bench/: two top-level functions with the same code (as
Python parses it, names of their own aside) are one helper, in bench/common.py."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The function's code without its name and docstring."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return "\n".join(ast.dump(node) for node in body) + ast.dump(fn.args)


def test_no_helper_is_defined_twice() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "main":
                seen[_body(node)].append(f"{path.relative_to(BENCH)}:{node.name}")
    twice = [where for where in seen.values() if len(where) > 1]
    assert not twice, f"the same helper in several places (move it to bench/common.py): {twice}"
