"""What the commands share: the flags that override settings (one per setting), the settings
they make, the environment a command's child processes get, and a stop on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import signal
import threading
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from processor.config import Settings, load_settings
from processor.logs import configure_logging

# The coordinator's metrics port as `processor local` serves it (status, state ask it).
COORDINATOR_URL = "http://127.0.0.1:9400"

# Flags that override settings, shared by every command that talks to Kafka.
_SETTING_FLAGS: list[tuple[str, type, str]] = [
    ("bootstrap_servers", str, "Kafka bootstrap servers (PROCESSOR_BOOTSTRAP_SERVERS)"),
    ("job_name", str, "job name: prefix of its internal topics (PROCESSOR_JOB_NAME)"),
    ("input_topic", str, "input topic (PROCESSOR_INPUT_TOPIC)"),
    ("output_topic", str, "output topic (PROCESSOR_OUTPUT_TOPIC)"),
    (
        "pipeline",
        str,
        "the pipeline to run, path/to/file.py[:attribute] (PROCESSOR_PIPELINE); "
        "default: the built-in word count of the input topic into the output topic",
    ),
    ("shuffle_partitions", int, "partitions of <job>.shuffle (PROCESSOR_SHUFFLE_PARTITIONS)"),
    ("checkpoint_interval_ms", int, "checkpoint interval (PROCESSOR_CHECKPOINT_INTERVAL_MS)"),
    ("state_dir", Path, "local RocksDB state (PROCESSOR_STATE_DIR)"),
    (
        "checkpoint_dir",
        str,
        "checkpoint storage: directory or s3://bucket/prefix (PROCESSOR_CHECKPOINT_DIR)",
    ),
    ("metrics_port", int, "serve /metrics on this port, 0 = off (PROCESSOR_METRICS_PORT)"),
    (
        "from_savepoint",
        str,
        "start a new job from this savepoint: a name, a directory or s3://... "
        "(PROCESSOR_FROM_SAVEPOINT)",
    ),
]


def settings_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    for name, kind, text in _SETTING_FLAGS:
        parent.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, help=text)
    more = parent.add_argument_group(
        "more settings", "each also PROCESSOR_<NAME> (docs/operations.md: Configuration)"
    )
    for name, options in _generated_flags().items():
        more.add_argument("--" + name.replace("_", "-"), dest=name, **options)
    return parent


def _generated_flags() -> dict[str, dict[str, Any]]:
    """A flag for every other setting, made from its type in `Settings`: choices for a
    Literal, --x/--no-x for a bool. None for secrets (a command line is visible to every user
    of the machine: PROCESSOR_SECRETS_DIR or the environment) or the Kafka client's map."""
    written = {name for name, _, _ in _SETTING_FLAGS}
    flags: dict[str, dict[str, Any]] = {}
    for name, field in Settings.model_fields.items():
        kind = field.annotation
        if name in written or kind in (SecretStr, dict[str, SecretStr]):
            continue
        default = field.get_default(call_default_factory=False)
        shown = (
            ""
            if default is PydanticUndefined
            else "; unset by default"
            if default is None
            else f"; default {default!r}"
            if isinstance(default, str)
            else f"; default {default}"
        )
        options: dict[str, Any] = {"help": f"PROCESSOR_{name.upper()}{shown}"}
        if typing.get_origin(kind) is typing.Literal:
            options["choices"] = list(typing.get_args(kind))
        elif kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif kind in (int, int | None):
            options["type"] = int
        else:
            options["type"] = str  # str, Path, a directory or s3:// location: checked later
        flags[name] = options
    return flags


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = [name for name, _, _ in _SETTING_FLAGS] + list(_generated_flags())
    return {name: getattr(args, name, None) for name in names}


def command_settings(args: argparse.Namespace, **extra: Any) -> Settings:
    settings = load_settings(**overrides(args), **extra)
    if "job_name" in settings.model_fields_set:  # PROCESSOR_JOB_NAME (or a secret file)
        return settings
    from processor.jobs import default_job_name

    return load_settings(**{**overrides(args), **extra, "job_name": default_job_name(settings)})


def setup(args: argparse.Namespace, **extra: Any) -> Settings:
    """A command's settings (its flags over the environment), its logging configured."""
    settings = command_settings(args, **extra)
    configure_logging(settings.log_level, settings.worker_id or args.command, settings.log_format)
    return settings


def child_env(args: argparse.Namespace) -> dict[str, str]:
    """CLI overrides as environment for child processes."""
    return {f"PROCESSOR_{k.upper()}": str(v) for k, v in overrides(args).items() if v is not None}


def stop_event() -> threading.Event:
    """Set on SIGTERM or SIGINT: a service's, or a long command's, clean stop."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
