"""The command line explains itself: a version, help for every option, the exit codes."""

from __future__ import annotations

import argparse

import pytest

from processor import cli
from processor.commands.base import command_settings


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


def test_every_setting_but_the_secrets_has_a_flag() -> None:
    """Generated from `Settings`: a new setting gets its flag without a line here."""
    from processor.config import Settings

    local = _subparsers(cli.build_parser())["local"]
    dests = {action.dest for action in local._actions}
    secrets = {"s3_access_key_id", "s3_secret_access_key", "api_token", "kafka_config"}
    assert set(Settings.model_fields) - dests == secrets


def test_a_flag_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_CHECKPOINT_ALIGNMENT", "aligned")
    monkeypatch.setenv("PROCESSOR_COMBINE", "true")
    args = cli.build_parser().parse_args(
        ["local", "--checkpoint-alignment", "unaligned", "--no-combine", "--flush-keys", "7"]
    )
    settings = command_settings(args)
    assert settings.checkpoint_alignment == "unaligned"
    assert settings.combine is False and settings.flush_keys == 7
    with pytest.raises(SystemExit):  # not one of the choices
        cli.build_parser().parse_args(["local", "--guarantee", "maybe"])
