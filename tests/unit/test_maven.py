"""Maven's downloads against the committed SHA-256 lists (processor/maven.py).

Pure logic on fake jars in a temporary directory, plus one ``fetch`` through a stand-in
``mvn`` script that records its command line; the real fetches of the committed lists run
in the integration tests (the broker, S3Proxy, the registry) and by hand (see the report).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from processor import maven
from processor.localkafka.brokertools import BROKER_SUMS, TOOLS_SUMS

POM = "<project>fake</project>\n"


def _libs(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    libs = home / "libs"
    libs.mkdir(parents=True)
    (libs / "a-1.0.jar").write_bytes(b"jar a")
    (libs / "b-2.0.jar").write_bytes(b"jar b")
    sums = tmp_path / "set.sha256"
    assert maven.write_sums(libs, sums) == 2
    return home, sums


def _error(libs: Path, sums: Path) -> str:
    with pytest.raises(maven.MavenError) as info:
        maven.verify(libs, maven.parse_sums(sums.read_text(), sums), sums)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_good_set_is_accepted(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    maven.verify(home / "libs", maven.parse_sums(sums.read_text(), sums), sums)
    # sha256sum's own format: `sha256sum -c` reads the committed lists too.
    assert sums.read_text().splitlines()[0].endswith("  a-1.0.jar")


def test_a_tampered_jar_is_refused(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    (home / "libs" / "b-2.0.jar").write_bytes(b"jar b, with a backdoor")
    message = _error(home / "libs", sums)
    assert str(home / "libs" / "b-2.0.jar") in message
    assert str(sums) in message


def test_an_unlisted_file_is_refused(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    (home / "libs" / "extra-0.1.jar").write_bytes(b"who put this here")
    message = _error(home / "libs", sums)
    assert str(home / "libs" / "extra-0.1.jar") in message
    assert "not in the checksum list" in message
    assert "--write-sums" in message  # how to write the list after a version bump


def test_a_listed_file_that_is_missing_is_refused(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    (home / "libs" / "a-1.0.jar").unlink()
    assert str(home / "libs" / "a-1.0.jar") in _error(home / "libs", sums)


@pytest.mark.parametrize("line", ["abc  a.jar", "0" * 64 + "  ../a.jar", "0" * 64 + "a.jar"])
def test_a_malformed_list_is_refused(tmp_path: Path, line: str) -> None:
    sums = tmp_path / "bad.sha256"
    with pytest.raises(maven.MavenError, match=rf"{sums}:1: "):
        maven.parse_sums(line + "\n", sums)


def _complete(home: Path) -> None:
    """What an older processor left: a complete copy, never checked."""
    (home / ".complete").write_text(maven.digest(POM) + "\n")


def test_a_copy_fetched_before_the_lists_is_checked_in_place(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    _complete(home)
    assert not maven.fetched(home, POM, sums)
    assert maven.fetch(home, POM, "fake", "a-*.jar", sums) == home / "libs"
    assert maven.fetched(home, POM, sums)
    # A changed list (a version bump, an edit) is a different list: checked again.
    sums.write_text(sums.read_text() + f"{'0' * 64}  c-3.0.jar\n")
    assert not maven.fetched(home, POM, sums)
    with pytest.raises(maven.MavenError, match=r"c-3\.0\.jar"):
        maven.fetch(home, POM, "fake", "a-*.jar", sums)


def test_a_tampered_copy_is_never_marked_checked(tmp_path: Path) -> None:
    home, sums = _libs(tmp_path)
    _complete(home)
    (home / "libs" / "a-1.0.jar").write_bytes(b"swapped")
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(maven.MavenError, match=r"a-1\.0\.jar"):
            maven.fetch(home, POM, "fake", "a-*.jar", sums)
    assert not (home / ".checked").exists()


def test_fetch_runs_mvn_with_strict_checksums_then_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in mvn: records its arguments and "downloads" the two jars of _libs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#*=}";; esac; done\n'
        'mkdir -p "$out" && printf "jar a" > "$out/a-1.0.jar"\n'
        'printf "jar b" > "$out/b-2.0.jar"\n'
    )
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    home, sums = _libs(tmp_path)
    (home / "libs" / "stale.jar").write_bytes(b"from an older set")  # removed by the fetch
    assert maven.fetch(home, POM, "fake", "a-*.jar", sums) == home / "libs"
    args = (tmp_path / "args").read_text().split()
    assert "--strict-checksums" in args
    assert maven.fetched(home, POM, sums)
    # The repository serves something else now: fetched again, refused, not marked.
    (home / ".complete").unlink()
    sums.write_text(sums.read_text().replace("a-1.0.jar", "a-1.1.jar"))
    with pytest.raises(maven.MavenError, match=r"a-1\.0\.jar: not in the checksum list"):
        maven.fetch(home, POM, "fake", "a-*.jar", sums)
    assert not maven.fetched(home, POM, sums)


def test_a_missing_list_names_the_command_that_writes_it(tmp_path: Path) -> None:
    home, _ = _libs(tmp_path)
    _complete(home)
    missing = tmp_path / "none.sha256"
    with pytest.raises(maven.MavenError) as info:
        maven.fetch(home, POM, "fake", "a-*.jar", missing)
    assert f"--write-sums {missing} {home / 'libs'}" in str(info.value)


def test_write_sums_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, sums = _libs(tmp_path)
    target = tmp_path / "new" / "set.sha256"
    assert maven.main(["--write-sums", str(target), str(home / "libs")]) == 0
    assert target.read_text() == sums.read_text()
    assert "2 files" in capsys.readouterr().out
    assert maven.main(["--write-sums", str(target), str(tmp_path / "absent")]) == 1


def test_the_committed_kafka_lists_are_well_formed() -> None:
    for sums in (BROKER_SUMS, TOOLS_SUMS):
        listed = maven.parse_sums(sums.read_text(), sums)
        assert any(name.startswith("kafka") for name in listed), sums
        assert any(name.startswith("log4j-core-") for name in listed), sums
