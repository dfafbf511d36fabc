"""``processor coordinator``: the job's coordinator, until SIGTERM/SIGINT (or idle, or a
stopped task, when asked)."""

from __future__ import annotations

import argparse

from processor.commands import base


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument("--exit-when-idle", action="store_true", help="stop once all input is done")
    parser.add_argument(
        "--drain",
        action="store_true",
        help="with --exit-when-idle: once idle, end event time so that every window and timer "
        "fires, then exit when idle again (as Flink's stop --drain)",
    )
    parser.add_argument(
        "--exit-when-stopped",
        action="store_true",
        help="exit with 3 once a task stops on a failing record (PROCESSOR_ON_ERROR=stop)",
    )


def run(args: argparse.Namespace) -> int:
    from processor.commands.local import EXIT_STOPPED
    from processor.coordinator.service import CoordinatorService

    settings = base.setup(args)
    # The coordinator serves /metrics with its status page and API on the same port.
    stopped = CoordinatorService(settings).run(
        base.stop_event(), args.exit_when_idle, args.exit_when_stopped, args.drain
    )
    return EXIT_STOPPED if stopped else 0
