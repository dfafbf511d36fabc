"""Local directories the service keeps state in, made private and checked before use.

The defaults were under ``/tmp``, where any local user can create ``/tmp/processor`` first:
world-readable state, symlinks followed, and a cleanup that removes digit-named entries under
a directory someone else planted. Now the default is per user
(``config.default_state_root``: ``$XDG_STATE_HOME/processor``, else
``~/.local/state/processor``), every directory the service creates is ``0700``, and a state
or checkpoint directory that is a symbolic link, or that belongs to another user than
this one or root, is refused with one line. (Root-owned is fine: only root could have planted
it; a container's volume or a Kubernetes ``emptyDir`` is root-owned.)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from processor.errors import SettingsError


def private_dir(path: Path, setting: str) -> Path:
    """``path``, created ``0700`` where missing; SettingsError naming ``setting`` if it is a
    symbolic link or another user's (not this one's, not root's)."""
    path = path.expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(path)
    except OSError as exc:
        raise SettingsError(f"invalid setting {setting}: {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise SettingsError(
            f"invalid setting {setting}: {path} is a symbolic link; give the directory itself"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise SettingsError(f"invalid setting {setting}: {path} is not a directory")
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise SettingsError(
            f"invalid setting {setting}: {path} belongs to uid {info.st_uid}, not to this user "
            f"({me}) or root: someone else may have made it; use a directory of your own"
        )
    return path
