"""Java programs from Maven Central: a pom's runtime dependencies, resolved once into a cache.

The local Kafka broker and the tests' S3 server both run from jars that ``mvn`` copies into
``<home>/libs``. A marker holding the pom's digest says the copy is complete and of this
exact dependency set; a lock lets two processes (a CLI and a test session) fetch at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MVN_BOILERPLATE = ("To see the full", "Re-run Maven", "For more information", "[Help ")
TIMEOUT_S = 1800.0


class MavenError(Exception):
    """The jars could not be fetched; the message is one line."""


def fetched(home: Path, pom: str) -> bool:
    """Whether ``home/libs`` holds the complete dependency set of ``pom``."""
    try:
        marker = (home / ".complete").read_text().strip()
    except OSError:
        return False
    return marker == digest(pom) and (home / "libs").is_dir()


def fetch(home: Path, pom: str, what: str, expect: str) -> Path:
    """Copy ``pom``'s runtime dependencies into ``home/libs`` unless already there.

    ``what`` names the program in errors; ``expect`` is a glob that must match a jar after.
    """
    libs = home / "libs"
    if fetched(home, pom):
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with locked(home / ".lock"):
        if fetched(home, pom):
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenError(f"mvn not found on PATH: install Apache Maven 3 to fetch {what}")
        (home / "pom.xml").write_text(pom)
        # Jars of an interrupted or older fetch may be a different dependency set;
        # leftovers would end up on the classpath next to the new ones.
        shutil.rmtree(libs, ignore_errors=True)
        (home / ".complete").unlink(missing_ok=True)
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never",
            "-f", str(home / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={libs}",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                cmd,
                cwd=home,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise MavenError(
                f"mvn did not finish fetching {what} in {TIMEOUT_S:.0f}s: "
                f"{tail(as_text(exc.output))}"
            ) from exc
        if done.returncode != 0:
            raise MavenError(
                f"mvn failed (exit {done.returncode}) fetching {what}: {mvn_error(done.stdout)}"
            )
        if not any(libs.glob(expect)):
            raise MavenError(f"mvn succeeded but put no {what} jar in {libs}")
        (home / ".complete").write_text(digest(pom) + "\n")
    return libs


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def as_text(output: str | bytes | None) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def mvn_error(output: str) -> str:
    """Maven's actual complaint; its last lines are always the same -e/-X/help boilerplate."""
    for line in _ANSI.sub("", output).splitlines():
        text = line.removeprefix("[ERROR]").strip()
        if line.startswith("[ERROR]") and text and not text.startswith(_MVN_BOILERPLATE):
            return text.removesuffix("-> [Help 1]").strip()
    return tail(output)


def tail(output: str, lines: int = 5, width: int = 600) -> str:
    """The last few meaningful lines of a tool's output, joined into one line."""
    kept = [line.strip() for line in _ANSI.sub("", output).splitlines() if line.strip()]
    if not kept:
        return "(no output)"
    text = " | ".join(kept[-lines:])
    return text if len(text) <= width else "..." + text[-width:]
