"""What a results file says of the code it measured, and how a run stops: the commit and the
uncommitted files of processor/, whether two commits measure the same code (a full run in
sittings), SIGTERM unwound like Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so that every `finally` stops its processes."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# What a sitting measures: everything but the results, the docs and the tests.
NOT_MEASURED = (":!bench/results", ":!*.md", ":!docs", ":!tests", ":!.ci")


def same_measured_code(a: str, b: str | None) -> bool:
    """Whether commits ``a`` and ``b`` run the same code (a full run in several sittings may
    span commits that only add results, docs or tests)."""
    if b is None:
        return False
    if a == b:
        return True
    done = subprocess.run(
        ["git", "diff", "--quiet", a, b, "--", ".", *NOT_MEASURED], cwd=ROOT, check=False
    )
    return done.returncode == 0


def source_version() -> dict[str, Any]:
    """The commit measured, and which files of the project differed from it (uncommitted)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    dirty = [line[3:] for line in git("status", "--porcelain", "processor").splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "uncommitted_processor_files": dirty}
