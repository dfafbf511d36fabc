"""Java programs from Maven Central: a pom's runtime dependencies, resolved once into a cache.

The local Kafka broker and the tests' S3 server both run from jars that ``mvn`` copies into
``<home>/libs``. ``mvn --strict-checksums`` refuses a download whose checksum does not match
the repository's, and then every file in ``libs`` must be in a committed list of SHA-256 sums
(``sha256sum`` format, one list per fetched set): what the repository serves today must be
what was reviewed when the list was written. Two markers say the copy is complete and of
this exact dependency set (the pom's digest) and that every file matched the list (the
list's digest); a lock lets two processes (a CLI and a test session) fetch at once.

After a version bump the fetch fails for want of a list (or on unlisted jars) and names the
command that writes one from the jars it fetched (review the diff, then commit it)::

    python -m processor.maven --write-sums processor/localkafka/checksums/kafka-<v>.sha256 \
        ~/.cache/processor/kafka-<v>/libs
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](\S.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MVN_BOILERPLATE = ("To see the full", "Re-run Maven", "For more information", "[Help ")
TIMEOUT_S = 1800.0


class MavenError(Exception):
    """The jars could not be fetched; the message is one line."""


def fetched(home: Path, pom: str, sums: Path) -> bool:
    """Whether ``home/libs`` holds the complete, checked dependency set of ``pom``."""
    return _complete(home, pom) and _checked(home, sums)


def _complete(home: Path, pom: str) -> bool:
    # Its own marker, as before checksum lists: a checkout of an older processor sharing the
    # cache keeps using the set rather than fetching it again (and over this one's).
    try:
        marker = (home / ".complete").read_text().strip()
    except OSError:
        return False
    return marker == digest(pom) and (home / "libs").is_dir()


def _checked(home: Path, sums: Path) -> bool:
    try:
        return (home / ".checked").read_text().strip() == checked_text(sums.read_text())
    except OSError:
        return False


def checked_text(sums_text: str) -> str:
    """The second marker: the checksum list every file of ``libs`` matched."""
    return f"sha256 list {digest(sums_text)}"


def fetch(home: Path, pom: str, what: str, expect: str, sums: Path) -> Path:
    """Copy ``pom``'s runtime dependencies into ``home/libs`` unless already there.

    ``what`` names the program in errors; ``expect`` is a glob that must match a jar after;
    ``sums`` is the committed list every fetched file must match (``verify``).
    """
    libs = home / "libs"
    if fetched(home, pom, sums):
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with locked(home / ".lock"):
        if fetched(home, pom, sums):
            return libs
        if _complete(home, pom):
            # Fetched before this list existed or changed: the jars are checked as they are.
            check(home, sums, what)
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenError(f"mvn not found on PATH: install Apache Maven 3 to fetch {what}")
        (home / "pom.xml").write_text(pom)
        # Jars of an interrupted or older fetch may be a different dependency set;
        # leftovers would end up on the classpath next to the new ones.
        shutil.rmtree(libs, ignore_errors=True)
        (home / ".complete").unlink(missing_ok=True)
        (home / ".checked").unlink(missing_ok=True)
        cmd = [
            mvn, "-q", "-B", "-Dstyle.color=never",
            # A download whose checksum differs from the repository's fails the build
            # rather than a warning. (Artifacts already in ~/.m2 are not checked again:
            # the committed list is what covers them.)
            "--strict-checksums",
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
        check(home, sums, what)
    return libs


def check(home: Path, sums: Path, what: str) -> None:
    """Verify ``home/libs`` against the list ``sums`` and mark it checked, or raise."""
    libs = home / "libs"
    try:
        # Read once: the marker names the very list the files were checked against.
        listed = sums.read_text()
    except OSError:
        raise MavenError(
            f"no checksum list {sums} for {what}: check the jars in {libs}, then write it "
            f"with: python -m processor.maven --write-sums {sums} {libs}"
        ) from None
    verify(libs, parse_sums(listed, sums), sums)
    (home / ".checked").write_text(checked_text(listed) + "\n")


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def parse_sums(text: str, source: Path) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>``) as name -> hex digest."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _SUM_LINE.match(line)
        if match is None or "/" in match.group(2):
            raise MavenError(f"{source}:{number}: not a '<sha256>  <file name>' line")
        sums[match.group(2)] = match.group(1)
    return sums


def verify(libs: Path, sums: dict[str, str], source: Path) -> None:
    """Raise ``MavenError`` (one line naming the file) unless ``libs`` holds exactly the files
    of ``sums``, each with its listed SHA-256."""
    present = sorted(libs.iterdir())
    for path in present:
        want = sums.get(path.name)
        if want is None:
            raise MavenError(
                f"{path}: not in the checksum list {source} (after a version bump: "
                f"python -m processor.maven --write-sums {source} {libs})"
            )
        got = file_sha256(path) if path.is_file() else "not a file"
        if got != want:
            raise MavenError(f"{path}: SHA-256 {got} is not {want} of the checksum list {source}")
    missing = sorted(set(sums) - {path.name for path in present})
    if missing:
        raise MavenError(f"{libs / missing[0]}: in the checksum list {source} but not fetched")


def write_sums(libs: Path, target: Path) -> int:
    """Write the ``sha256sum`` list of every file in ``libs`` to ``target``; returns how many."""
    files = sorted(p for p in libs.iterdir() if p.is_file())
    if not files:
        raise MavenError(f"{libs} holds no files")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(f"{file_sha256(p)}  {p.name}\n" for p in files))
    return len(files)


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


def main(argv: list[str] | None = None) -> int:
    """``python -m processor.maven --write-sums LIST LIBS``: (re)write a checksum list."""
    parser = argparse.ArgumentParser(prog="python -m processor.maven", description=__doc__)
    parser.add_argument(
        "--write-sums",
        nargs=2,
        metavar=("LIST", "LIBS"),
        type=Path,
        required=True,
        help="write the SHA-256 of every file in the directory LIBS to LIST (sha256sum format)",
    )
    args = parser.parse_args(argv)
    target, libs = args.write_sums
    try:
        count = write_sums(libs, target)
    except (MavenError, OSError) as exc:
        print(f"processor.maven: {exc}", file=sys.stderr)
        return 1
    print(f"{target}: {count} files of {libs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
