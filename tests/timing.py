"""Where a long run's time goes: per test file and per pytest-xdist worker, printed after the
slowest tests. The figures are the tests' own (setup, call and teardown, as each worker
reports them), so a file's total is what it adds to its worker's time; with the workers'
totals side by side, CI's log says whether a slow run was one file or an unbalanced end.

Hooks of tests/conftest.py (imported there): a run under a minute prints nothing.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

SHOWN = 20  # files listed, the longest first
QUIET_BELOW_S = 60.0

_by_file: defaultdict[str, float] = defaultdict(float)
_by_worker: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _by_file[report.nodeid.split("::", 1)[0]] += report.duration
    # Under xdist the controller's report carries the worker it came from.
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    _by_worker[str(getattr(gateway, "id", "main"))] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_by_file.values())
    if os.environ.get("PYTEST_XDIST_WORKER") or total < QUIET_BELOW_S:
        return
    write = terminalreporter.write_line
    terminalreporter.section("time per test file")
    for path, seconds in sorted(_by_file.items(), key=lambda kv: -kv[1])[:SHOWN]:
        write(f"{seconds:8.1f}s  {path}")
    write(f"{total:8.1f}s  all {len(_by_file)} files")
    workers = ", ".join(f"{name} {s:.0f}s" for name, s in sorted(_by_worker.items()))
    write(f"per worker: {workers}")
