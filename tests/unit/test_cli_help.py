"""The command line explains itself: a version, help for every option, the exit codes."""

from __future__ import annotations

import argparse

import pytest

from processor import cli


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("processor ")


def test_every_option_of_every_command_has_help() -> None:
    parser = cli.build_parser()
    missing = [
        f"{name} {action.dest}"
        for name, sub in _subparsers(parser).items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and sub.add_help and not action.help
    ]
    assert missing == []


def test_help_lists_the_exit_codes() -> None:
    text = cli.build_parser().format_help()
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n  {code} " in text
