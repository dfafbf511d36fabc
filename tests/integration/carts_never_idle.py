"""examples/carts.py with sources that never count as idle: a test that stops its feed for a
kill must not let one partition's watermark pass a cart whose checkout is still to be read
from another (event time with idleness depends on timing, which the test must not)."""

import runpy
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "carts.py"


def build(**topics: str) -> Any:
    return runpy.run_path(str(EXAMPLE))["build"](**topics, idle_ms=3_600_000)
