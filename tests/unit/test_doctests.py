"""The ``>>>`` examples of the user's API run and show what they say: every module of
processor/api and processor/serde, and processor.testing, with ``Pipeline`` and
`processor.testing.run` in scope (as processor/api's docstrings say)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import processor
from processor import Pipeline
from processor.testing import run

ROOT = Path(processor.__file__).parent
MODULES = sorted(
    {
        ".".join(("processor", *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for package in ("api", "serde")
        for p in (ROOT / package).glob("*.py")
    }
    | {"processor.testing"}
)


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    globs = {"Pipeline": Pipeline, "run": run}
    result = doctest.testmod(module, extraglobs=globs, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_the_streams_show_examples() -> None:
    """Each method of the streams with a ``>>>`` example has it found and run."""
    module = importlib.import_module("processor.api.dataflow")
    tests = doctest.DocTestFinder(exclude_empty=True).find(module)
    shown = {t.name.rpartition(".")[2] for t in tests if t.examples}
    assert {"map", "flat_map", "key_by", "count", "sum", "reduce", "aggregate"} <= shown
    assert {"process", "window", "join"} <= shown
