"""`processor nexmark generate`'s pure parts: finding the crate's binary (or saying how to
install it), the closing event, and the command line. Loading a topic with the real binary is
tests/integration/test_nexmark.py's."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from processor.cli import build_parser, main
from processor.commands import nexmark


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_missing_binary_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(nexmark.NexmarkError) as missing:
        nexmark.find_binary()
    assert "cargo install --locked nexmark --version 0.2.0 --features bin" in str(missing.value)
    with pytest.raises(nexmark.NexmarkError, match="so is cargo"):
        nexmark.find_binary(install=True)


def test_the_binary_on_path_first_then_cargos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cargos = _executable(tmp_path / "home" / ".cargo" / "bin" / "nexmark")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert nexmark.find_binary() == cargos
    on_path = _executable(tmp_path / "bin" / "nexmark")
    assert nexmark.find_binary() == on_path
    assert os.access(on_path, os.X_OK)


def test_the_closing_event_is_a_person_no_auction_names() -> None:
    line = nexmark.closing_event(1_700_000_060_000)
    person = json.loads(line)["Person"]
    assert person["id"] == 0 < 1000  # the crate's ids start at 1000
    assert person["state"] not in ("or", "id", "ca")  # not q3's
    assert nexmark.event_time(line) == 1_700_000_060_000
    assert set(person) == {
        *("id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra")
    }


def test_the_command_line() -> None:
    args = build_parser().parse_args(
        ["nexmark", "generate", "--events", "5", "--topic", "t", "--bootstrap-servers", "b:1"]
    )
    assert (args.events, args.topic, args.partitions, args.rate) == (5, "t", 2, 0)
    assert (args.closing, args.install, args.binary) == (False, False, None)
    assert args.bootstrap_servers == "b:1"


def test_cargos_binary_of_another_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    binary = _executable(home / ".cargo" / "bin" / "nexmark")
    crates = home / ".cargo" / ".crates2.json"
    for version in ("0.2.0", "0.3.1"):
        package = f"nexmark {version} (registry+https://github.com/rust-lang/crates.io-index)"
        crates.write_text(json.dumps({"installs": {package: {"bins": ["nexmark"]}}}))
        assert nexmark.cargo_version(binary) == version
    with pytest.raises(nexmark.NexmarkError, match=r"is nexmark 0\.3\.1, not 0\.2\.0: .*--force"):
        nexmark.find_binary()
    crates.write_text("not json")
    assert nexmark.find_binary() == binary  # cargo's record unreadable: taken as it is


@pytest.mark.parametrize("wrong", [["--events", "0"], ["--partitions", "0"], ["--rate", "-1"]])
def test_nonsense_is_refused_before_any_work(wrong: list[str]) -> None:
    args = ["nexmark", "generate", "--events", "5", *wrong, "--bootstrap-servers", "nowhere:1"]
    assert main(args) == 2


def test_install_runs_cargo_with_the_contracts_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in cargo on PATH (the real build takes minutes: deploy/test.sh does it) that
    notes its arguments and puts a binary where cargo would."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    cargo = _executable(tmp_path / "bin" / "cargo")
    made = home / ".cargo" / "bin" / "nexmark"
    cargo.write_text(
        f'#!/bin/sh\nPATH=/usr/bin:/bin\necho "$@" > {tmp_path}/args\nmkdir -p {made.parent}\n'
        f"printf '#!/bin/sh\\n' > {made}\nchmod +x {made}\n"
    )
    assert nexmark.find_binary(install=True) == made
    args = (tmp_path / "args").read_text().split()
    assert args == ["install", "--locked", "nexmark", "--version", "0.2.0", "--features", "bin"]
    assert nexmark.find_binary() == made
