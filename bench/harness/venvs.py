"""Cached virtualenvs for what the benchmark needs but the project must not depend on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cached_venv(venv: Path, requirement: str, check: str) -> Path:
    """The python of ``venv``, with ``requirement`` installed once (``check`` is code that
    exits 0 when the venv is usable)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", check]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", requirement],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"pip install {requirement} failed: {' | '.join(tail)}")
    return python
