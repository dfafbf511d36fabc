"""The ``processor`` command: a table of commands, each in its module of `processor.commands`
with ``add_arguments(parser, common)`` and ``run(args) -> exit code``.

A command's module is imported only when it runs (or for the whole help): `processor status`
does not load the Kafka client."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from dataclasses import dataclass
from typing import Protocol, cast

from processor.api.streams import PipelineError
from processor.commands.base import settings_parent
from processor.config import SettingsError


class CommandModule(Protocol):
    def add_arguments(
        self, parser: argparse.ArgumentParser, common: argparse.ArgumentParser
    ) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Command:
    """``processor <name>``: one line of help, and whether it takes the settings' flags
    (``settings``) or parses its arguments itself (``raw``: `processor kafka`)."""

    help: str
    settings: bool = True
    raw: bool = False

    def module(self, name: str) -> CommandModule:
        return cast(CommandModule, importlib.import_module(f"processor.commands.{name}"))


COMMANDS: dict[str, Command] = {
    "kafka": Command(
        "start|stop|status the local Kafka broker, or a cluster (--brokers 3)",
        settings=False,
        raw=True,
    ),
    "coordinator": Command("run the job's coordinator"),
    "worker": Command("run a worker"),
    "local": Command("coordinator + N workers on this machine"),
    "produce": Command("lines of text files into a topic"),
    "counts": Command(
        "word count: the final count per word in committed output (any other sink: tail --latest)"
    ),
    "savepoint": Command("take, list or delete savepoints of the job"),
    "acls": Command("the Kafka ACLs the job needs, as kafka-acls.sh commands"),
    # Its subcommand takes the settings' flags.
    "postgres": Command("the job's PostgreSQL sinks (docs/postgres.md)", settings=False),
    "nexmark": Command("Nexmark: the nexmark crate's events into a topic", settings=False),
    "status": Command("the coordinator's checkpoint and task status", settings=False),
    "state": Command(
        "queryable state: a key's committed value from the workers (docs/query-state.md)",
        settings=False,
    ),
    "tail": Command("what a topic holds, committed, decoded (any sink)"),
    "corpus": Command("word count: write a seeded Zipf text corpus", settings=False),
    "demo": Command("word count end to end on a local broker"),
}

_EXIT_CODES = """exit codes:
  0    done (or stopped by SIGTERM / SIGINT, a service)
  1    failed: a task failed for good, a check found a difference, a service died
  2    refused at start, with one line: a setting, the pipeline, an ACL, a savepoint
  3    coordinator --exit-when-stopped: a task stopped on a failing record
       (PROCESSOR_ON_ERROR=stop); processor local then exits 1
  130  interrupted (Ctrl-C)
"""


def _version() -> str:
    try:
        return importlib.metadata.version("processor")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``only``: the arguments of that command alone (the others
    listed by name and help, "" for none), so that only its module is imported."""
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Exactly-once stream processing on Kafka.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"processor {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = settings_parent()
    for name, command in COMMANDS.items():
        parents = [common] if command.settings else []
        added = sub.add_parser(name, parents=parents, help=command.help, add_help=not command.raw)
        if only is None or only == name:
            command.module(name).add_arguments(added, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else None
    command = COMMANDS.get(name) if name is not None else None
    if name is not None and command is not None and command.raw:
        from processor.commands import kafka

        return kafka.main(argv[1:])
    # Only the command given is imported (none for the top-level help, or a mistake).
    args = build_parser(only=name or "").parse_args(argv)
    try:
        return COMMANDS[args.command].module(args.command).run(args)
    except (SettingsError, PipelineError) as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
