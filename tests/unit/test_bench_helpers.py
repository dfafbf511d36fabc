"""bench/ is a harness, not a notebook. No helper is written twice in bench/: two top-level
functions with the same code (as Python parses it, names of their own aside) are one helper, in
bench/harness/common.py. A results file is kept only while a README quotes it by name, and every
bench script a README names exists."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"

# Where a results file may be quoted: the README (its text may move into docs/, the file names
# stay), docs/, and bench's own two.
_BENCH_DOCS = [BENCH / "README.md", BENCH / "experiments" / "README.md"]


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
    assert not twice, (
        f"the same helper in several places (move it to bench/harness/common.py): {twice}"
    )


def _docs() -> dict[Path, str]:
    """Every markdown file that may quote a results file or name a bench script, by path."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *_BENCH_DOCS]
    return {path: path.read_text() for path in paths if path.is_file()}


def _results_files() -> list[str]:
    """The results files the repository holds (git's list: a local run's new files count only
    once committed), as paths under bench/results."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "bench/results"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        return sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file())
    prefix = "bench/results/"
    return sorted(name.removeprefix(prefix) for name in listed.split("\0") if name)


def _globs(text: str) -> list[str]:
    """The file-name patterns a text quotes (`bench/results/20261130-20*-latency-*.json`), as
    their last path component: with an extension, no markdown `**`, and a literal stem of 8
    characters or more, so that `*.json` quotes nothing."""
    patterns = (m.rsplit("/", 1)[-1] for m in re.findall(r"[\w./-]*\*[\w.*/-]*", text))
    return [
        p
        for p in patterns
        if re.fullmatch(r"[\w.*-]+\.\w+", p) and "**" not in p and len(p.split("*", 1)[0]) >= 8
    ]


def test_every_results_file_is_quoted() -> None:
    texts = list(_docs().values())
    globs = [pattern for text in texts for pattern in _globs(text)]
    unquoted = [
        name
        for name in _results_files()
        if not any(Path(name).name in text for text in texts)
        and not any(fnmatch.fnmatchcase(Path(name).name, pattern) for pattern in globs)
    ]
    assert not unquoted, (
        "results files no README or docs/*.md quotes by name: quote them or `git rm` them: "
        f"{unquoted}"
    )


def test_every_bench_script_named_in_the_docs_exists() -> None:
    missing = []
    for path, text in _docs().items():
        for named in sorted(set(re.findall(r"(?<![\w./-])bench/[\w./-]*?\.py\b", text))):
            if (ROOT / named).is_file():
                continue
            missing.append(f"{path.relative_to(ROOT)}: {named}")
    assert not missing, f"bench scripts the docs name that do not exist: {missing}"


def test_the_bench_readme_stays_short() -> None:
    """bench/README.md is the method and today's figures; past runs are in the git history."""
    lines = (BENCH / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 400, f"bench/README.md has {len(lines)} lines: the history goes to git"
