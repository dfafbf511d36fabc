"""processor.logs: what every process writes to stderr, and what it writes on SIGUSR1."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import os, signal, threading, time
from processor.logs import configure_logging
configure_logging("info", "probe")
threading.Thread(target=time.sleep, args=(5,), name="sleeper", daemon=True).start()
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.2)
print("still running")
"""


def test_sigusr1_writes_every_threads_stack_and_the_process_goes_on() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert "still running" in done.stdout
    assert done.stderr.count("(most recent call first)") >= 2  # the main thread and the sleeper
