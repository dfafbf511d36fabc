"""Whether a process id still names a live process (not a zombie waiting to be reaped)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    # Our own exited child stays a zombie (and kill(pid, 0) succeeds) until reaped.
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Someone else's zombie child: gone for our purposes, only not yet reaped.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
