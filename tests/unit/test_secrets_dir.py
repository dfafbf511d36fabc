"""Secrets from files: PROCESSOR_SECRETS_DIR (a mounted Kubernetes or compose secret).

Precedence, first wins: CLI flags, then PROCESSOR_* variables, then the files. Files readable
by other users are refused, and no value read from a file shows in a repr, a dump or an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from processor.cli import build_parser
from processor.commands.base import child_env as _env
from processor.config import SECRETS_DIR_ENV, SettingsError, load_settings

TOKEN = "tok-from-a-file-5f1c"
PASSWORD = "sasl-pw-from-a-file-93ab"
KEY_ID = "AKIA-from-a-file"
SECRET_KEY = "s3-secret-from-a-file-77d0"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PROCESSOR_* variable of the developer's shell (or the test session) leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("PROCESSOR_"):
            monkeypatch.delenv(name)


def _write(directory: Path, name: str, value: str, mode: int = 0o400) -> Path:
    path = directory / name
    path.write_text(value + "\n")  # a trailing newline, as `kubectl create secret` files have
    path.chmod(mode)
    return path


@pytest.fixture
def secrets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    _write(directory, "PROCESSOR_API_TOKEN", TOKEN)
    _write(directory, "PROCESSOR_KAFKA_CONFIG", json.dumps({"sasl.password": PASSWORD}))
    _write(directory, "PROCESSOR_S3_ACCESS_KEY_ID", KEY_ID)
    _write(directory, "PROCESSOR_S3_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv(SECRETS_DIR_ENV, str(directory))
    return directory


def _error() -> str:
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    for secret in (TOKEN, PASSWORD, SECRET_KEY):
        assert secret not in message
    return message


def test_values_come_from_the_files(secrets_dir: Path) -> None:
    s = load_settings()
    assert s.api_token.get_secret_value() == TOKEN
    assert s.client_config()["sasl.password"] == PASSWORD  # JSON, as in the variable
    assert s.s3_access_key_id.get_secret_value() == KEY_ID
    assert s.s3_secret_access_key.get_secret_value() == SECRET_KEY


def test_no_files_are_read_without_the_variable(
    secrets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRETS_DIR_ENV)
    monkeypatch.chdir(secrets_dir)
    s = load_settings()
    assert s.api_token.get_secret_value() == ""
    assert s.kafka_config == {}


def test_the_environment_and_flags_win_over_the_files(
    secrets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCESSOR_API_TOKEN", "from-the-env")
    assert load_settings().api_token.get_secret_value() == "from-the-env"
    assert load_settings(api_token="from-a-flag").api_token.get_secret_value() == "from-a-flag"
    # PROCESSOR_KAFKA_CONFIG is merged key by key (pydantic-settings merges dicts across
    # sources), the variable's keys winning: the non-secret keys can stay in a ConfigMap.
    monkeypatch.setenv(
        "PROCESSOR_KAFKA_CONFIG", json.dumps({"sasl.username": "u", "sasl.password": "env"})
    )
    assert load_settings().client_config()["sasl.password"] == "env"
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps({"security.protocol": "SASL_SSL"}))
    config = load_settings().client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.password"] == PASSWORD


@pytest.mark.parametrize("mode", [0o400, 0o600, 0o440])
def test_owner_and_group_modes_are_accepted(secrets_dir: Path, mode: int) -> None:
    # 0440: what Kubernetes makes of defaultMode 0400 when the pod has an fsGroup.
    (secrets_dir / "PROCESSOR_API_TOKEN").chmod(mode)
    assert load_settings().api_token.get_secret_value() == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o402])
def test_a_file_other_users_can_access_is_refused(secrets_dir: Path, mode: int) -> None:
    path = secrets_dir / "PROCESSOR_API_TOKEN"
    path.chmod(mode)
    message = _error()
    assert message.startswith("invalid secrets: ")
    assert str(path) in message
    assert f"{mode:04o}" in message


def test_a_missing_directory_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not a warning: a token that silently is not read leaves the status page open.
    monkeypatch.setenv(SECRETS_DIR_ENV, str(tmp_path / "absent"))
    assert "PROCESSOR_SECRETS_DIR" in _error()


def test_a_file_that_is_not_json_names_the_setting_not_the_value(secrets_dir: Path) -> None:
    (secrets_dir / "PROCESSOR_KAFKA_CONFIG").unlink()
    _write(secrets_dir, "PROCESSOR_KAFKA_CONFIG", "{" + json.dumps(PASSWORD))
    message = _error()
    assert message.startswith("invalid setting PROCESSOR_KAFKA_CONFIG: not valid JSON")
    assert SECRETS_DIR_ENV in message


def test_values_from_files_never_show(secrets_dir: Path) -> None:
    s = load_settings()
    for text in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        for secret in (TOKEN, PASSWORD, SECRET_KEY):
            assert secret not in text


def test_local_children_get_the_directory_not_the_secrets(secrets_dir: Path) -> None:
    # `processor local` starts its children with its own environment plus child_env(args): the
    # secrets stay in the files, which the children read through the inherited variable.
    args = build_parser().parse_args(["local", "--workers", "1", "--job-name", "j"])
    overrides = _env(args)
    assert not any(secret in "".join(overrides.values()) for secret in (TOKEN, PASSWORD))
    child_env = {**os.environ, **overrides}
    assert not any(secret in "".join(child_env.values()) for secret in (TOKEN, PASSWORD))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from processor.config import load_settings; s = load_settings(); "
            "print(s.api_token.get_secret_value(), s.client_config()['sasl.password'])",
        ],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == [TOKEN, PASSWORD]
