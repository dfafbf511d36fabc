"""A real PostgreSQL server for tests and local runs, from the machine's own binaries.

Why a real server: the exactly-once PostgreSQL sink commits with two-phase commit
(``PREPARE TRANSACTION`` / ``COMMIT PREPARED``), which only a real server with
``max_prepared_transactions`` > 0 can show working; a mock would prove nothing.

Why these choices: Debian's packages (``postgresql``) put the binaries in
/usr/lib/postgresql/<major>/bin, off PATH, so they are looked for there first. The server
listens on 127.0.0.1 only, with trust authentication for the superuser ``processor``: it is a
throwaway for one machine, never reachable from elsewhere. Durability is switched off
(``fsync``, ``synchronous_commit``, ``full_page_writes``) because test data outlives no crash.
PostgreSQL refuses to run as root, so as root every server command runs as Debian's
``postgres`` system user, which then owns the data and socket directories.

Usage: ``python -m tests.postgres_server start|stop|bindir [--port P] [--data-dir D]``.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

HOST = "127.0.0.1"
USER = "processor"
SERVER_USER = "postgres"  # the system user Debian's package creates; used only as root
LOG_NAME = "postgres.log"
START_TIMEOUT_S = 60.0
SETTINGS = {
    "listen_addresses": HOST,
    "max_prepared_transactions": "64",
    "max_connections": "200",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class PostgresServerError(Exception):
    """The server could not be found, initialised, started or stopped."""


def find_bindir() -> Path | None:
    """The directory with ``postgres``, ``initdb`` and ``pg_ctl``, or None when there is none.

    The highest major version under /usr/lib/postgresql wins (several can be installed side
    by side); then ``pg_config --bindir``, checked for a server binary because libpq-dev's
    pg_config alone points at a directory without one.
    """
    root = Path("/usr/lib/postgresql")
    versions = (
        [p for p in root.glob("*/bin") if (p / "postgres").is_file()] if root.is_dir() else []
    )
    if versions:
        return max(versions, key=lambda p: _version_key(p.parent.name))
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(done.stdout.strip())
        if done.returncode == 0 and (bindir / "postgres").is_file():
            return bindir
    return None


def _version_key(name: str) -> tuple[int, ...]:
    # "15" or "9.6"; a stray non-numeric directory sorts lowest.
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (-1,)


def dsn(port: int) -> str:
    """The DSN of the server on ``port`` as the superuser, database ``postgres``."""
    return f"postgresql://{USER}@{HOST}:{port}/postgres"


def socket_dir(data_dir: Path) -> Path:
    """Where the server's unix socket goes: beside ``data_dir``, private to this server.

    Not /var/run/postgresql (root-owned, shared with a system cluster) and not inside the
    data directory (a socket path has a ~107-byte limit and the data dir is deep enough).
    """
    return data_dir.parent / f"{data_dir.name}-socket"


def start(
    data_dir: Path,
    port: int,
    timeout: float = START_TIMEOUT_S,
    settings: Mapping[str, str] | None = None,
) -> str:
    """Initialise ``data_dir`` if empty, start the server on ``port``, return its DSN.
    ``settings`` replace some of `SETTINGS` (a test of a server set up wrong).

    Returns once the server accepts connections; raises PostgresServerError with the tail
    of its log when it did not within ``timeout`` seconds (and stops what did start).
    """
    bindir = _bindir()
    sockets = socket_dir(data_dir)
    for directory in (data_dir, sockets):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _give_to_server_user(directory)
    if not any(data_dir.iterdir()):
        _initdb(bindir, data_dir)
    elif _running(bindir, data_dir):
        # Not ours to take over, nor (below, on failure) to stop.
        raise PostgresServerError(f"a server already runs on {data_dir}")
    options = {**SETTINGS, **(settings or {}), "port": str(port)}
    options["unix_socket_directories"] = str(sockets)
    log = data_dir / LOG_NAME
    command = [
        str(bindir / "pg_ctl"),
        "start",
        "--wait",
        f"--timeout={max(1, int(timeout))}",
        f"--pgdata={data_dir}",
        f"--log={log}",
        # pg_ctl hands these to a shell: each word is quoted.
        "-o",
        " ".join(shlex.quote(f"-c{key}={value}") for key, value in options.items()),
    ]
    deadline = time.monotonic() + timeout
    done = _run_as_server(command, cwd=data_dir)
    if done.returncode == 0 and _wait_ready(bindir, port, deadline):
        return dsn(port)
    stop(data_dir)
    raise PostgresServerError(
        f"PostgreSQL did not come up on {HOST}:{port} (waited up to {timeout:.0f}s; "
        f"pg_ctl: {done.stdout.strip()} {done.stderr.strip()}); tail of {log}:\n{_tail(log)}"
    )


def stop(data_dir: Path) -> None:
    """Stop the server of ``data_dir`` (fast: open sessions are ended); no-op if none runs."""
    if not (data_dir / "postmaster.pid").exists():
        return
    command = [str(_bindir() / "pg_ctl"), "stop", "--wait", "-m", "fast", f"--pgdata={data_dir}"]
    done = _run_as_server(command, cwd=data_dir)
    if done.returncode != 0 and (data_dir / "postmaster.pid").exists():
        raise PostgresServerError(f"pg_ctl stop failed: {done.stderr.strip()}")


def _bindir() -> Path:
    bindir = find_bindir()
    if bindir is None:
        raise PostgresServerError(
            "no PostgreSQL server binaries (looked in /usr/lib/postgresql/*/bin and "
            "pg_config --bindir); on Debian: apt-get install postgresql"
        )
    return bindir


def _running(bindir: Path, data_dir: Path) -> bool:
    status = _run_as_server([str(bindir / "pg_ctl"), "status", f"--pgdata={data_dir}"], data_dir)
    return status.returncode == 0


def _initdb(bindir: Path, data_dir: Path) -> None:
    command = [
        str(bindir / "initdb"),
        f"--pgdata={data_dir}",
        f"--username={USER}",
        "--auth-local=trust",
        "--auth-host=trust",
        "--encoding=UTF8",
        "--locale=C",  # no dependence on the machine's generated locales
        "--no-sync",
    ]
    done = _run_as_server(command, cwd=data_dir)
    if done.returncode != 0:
        raise PostgresServerError(f"initdb failed: {done.stdout.strip()} {done.stderr.strip()}")


def _wait_ready(bindir: Path, port: int, deadline: float) -> bool:
    # pg_ctl --wait has seen the server ready; this confirms the TCP listener clients use.
    while True:
        ready = subprocess.run(
            [str(bindir / "pg_isready"), "-q", f"-h{HOST}", f"-p{port}", f"-U{USER}"],
            check=False,
        )
        if ready.returncode == 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _server_user() -> pwd.struct_passwd | None:
    """The system user the server runs as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresServerError(
            f"PostgreSQL refuses to run as root and there is no '{SERVER_USER}' user to run it "
            "as (Debian's postgresql package creates one)"
        ) from None


def _give_to_server_user(directory: Path) -> None:
    user = _server_user()
    if user is not None:
        os.chown(directory, user.pw_uid, user.pw_gid)


def _run_as_server(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    user = _server_user()
    if user is not None:
        if shutil.which("runuser"):
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        else:
            command = [
                "setpriv",
                f"--reuid={SERVER_USER}",
                f"--regid={SERVER_USER}",
                "--init-groups",
                "--",
                *command,
            ]
    # stdin closed: the daemonised server must not hold our terminal.
    return subprocess.run(
        command, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def main(argv: list[str] | None = None) -> int:
    """``start`` prints the DSN; ``stop`` stops; ``bindir`` prints the binaries' directory."""
    parser = argparse.ArgumentParser(prog="python -m tests.postgres_server")
    parser.add_argument("action", choices=["start", "stop", "bindir"])
    parser.add_argument("--port", type=int, default=15432)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/processor-postgres/data"))
    args = parser.parse_args(argv)
    try:
        if args.action == "bindir":
            bindir = find_bindir()
            if bindir is None:
                return 1
            print(bindir)
        elif args.action == "start":
            print(start(args.data_dir.resolve(), args.port))
        else:
            stop(args.data_dir.resolve())
    except PostgresServerError as e:
        print(f"postgres_server: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
