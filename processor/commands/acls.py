"""``processor acls``: the Kafka ACLs the job's services need, as ``kafka-acls.sh`` commands
or a table (`processor.kafka.acls` holds the rules; docs/operations.md, Security)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from processor.config import Settings


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``processor acls`` in the command line."""
    acls = sub.add_parser(
        "acls", parents=[common], help="the Kafka ACLs the job needs, as kafka-acls.sh commands"
    )
    acls.add_argument(
        "--coordinator-principal", default="", help="the coordinator's principal, User:<name>"
    )
    acls.add_argument(
        "--worker-principal", default="", help="the workers' principal (they run user code)"
    )
    acls.add_argument(
        "--principal",
        default="",
        help="one principal for both (every right of each): rather give two principals",
    )
    acls.add_argument(
        "--command-config", default="", help="kafka-acls.sh --command-config (the admin's login)"
    )
    acls.add_argument("--table", action="store_true", help="a Markdown table, not commands")


def command(settings: Settings, args: argparse.Namespace) -> int:
    """Print the rules; 2 for a principal given by halves, or two ways at once."""
    from processor.jobs import load_graph
    from processor.kafka import acls

    coordinator, worker = args.coordinator_principal, args.worker_principal
    both = bool(coordinator and worker)
    if (args.principal and (coordinator or worker)) or ((coordinator or worker) and not both):
        print(
            "processor: give --coordinator-principal and --worker-principal, or "
            "--principal alone (one principal for both)",
            file=sys.stderr,
        )
        return 2
    if not (args.principal or both or args.table):
        print("processor: give --coordinator-principal and --worker-principal", file=sys.stderr)
        return 2
    rules = acls.graph_acls(settings, load_graph(settings))
    if args.principal:
        rules = acls.combined(rules)
    servers, config_file = settings.bootstrap_servers, args.command_config
    if args.table:
        print(acls.table(rules, roles=not args.principal), end="")
    elif args.principal:
        print(acls.render(rules, args.principal, servers, config_file), end="")
    else:
        print(acls.render_split(rules, coordinator, worker, servers, config_file), end="")
    return 0
