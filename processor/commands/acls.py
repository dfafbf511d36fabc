"""``processor acls``: the Kafka ACLs the job's services need, as ``kafka-acls.sh`` commands
or a table (`processor.kafka.acls` holds the rules; docs/operations.md, Security)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from processor.config import Settings

if TYPE_CHECKING:
    from processor.kafka.acls import AclRule


def add_arguments(acls: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``processor acls`` in the command line."""
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
    acls.add_argument(
        "--client-principal",
        default="",
        help="also the user's own producer and reader: Read, Write on the sources, Read on the "
        "sinks (with the two above)",
    )
    acls.add_argument("--table", action="store_true", help="a Markdown table, not commands")
    acls.add_argument(
        "--apply",
        action="store_true",
        help="create the ACLs through the admin API with this login (PROCESSOR_KAFKA_CONFIG: "
        "a super user's) instead of printing commands",
    )


def run(args: argparse.Namespace) -> int:
    """Print the rules; 2 for a principal given by halves, or two ways at once."""
    from processor.commands import base
    from processor.jobs import load_graph
    from processor.kafka import acls

    settings = base.setup(args)

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
    graph = load_graph(settings)
    rules = acls.graph_acls(settings, graph)
    client = args.client_principal
    if client and not both:
        print("processor: --client-principal goes with the two principals", file=sys.stderr)
        return 2
    client_rules = acls.client_acls(
        settings.job_name, graph.plan.source_topics, graph.plan.sink_topics
    )
    if args.apply:
        if not both:
            print("processor: --apply needs the two principals", file=sys.stderr)
            return 2
        granted = [(acls.of(rules, "coordinator"), coordinator), (acls.of(rules, "worker"), worker)]
        return apply(settings, [*granted, *([(client_rules, client)] if client else [])])
    if args.principal:
        rules = acls.combined(rules)
    servers, config_file = settings.bootstrap_servers, args.command_config
    if args.table:
        print(acls.table(rules, roles=not args.principal), end="")
    elif args.principal:
        print(acls.render(rules, args.principal, servers, config_file), end="")
    else:
        print(acls.render_split(rules, coordinator, worker, servers, config_file), end="")
        if client:
            print(f"\n## The user's own producer and reader, {client}")
            print(acls.render(client_rules, client, servers, config_file), end="")
    return 0


def apply(settings: Settings, granted: list[tuple[list[AclRule], str]]) -> int:
    """Create each principal's rules on the broker; 1 with one line when one is refused."""
    from confluent_kafka import KafkaError, KafkaException

    from processor.kafka import acls, clients

    bindings = [b for rules, principal in granted for b in acls.bindings(rules, principal)]
    admin = clients.admin(settings)
    try:
        for future in admin.create_acls(bindings, request_timeout=30).values():
            future.result(timeout=60)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        why = err.str() if isinstance(err, KafkaError) else str(err)
        print(f"processor: creating the ACLs failed: {why}", file=sys.stderr)
        return 1
    names = ", ".join(principal for _, principal in granted)
    print(f"processor acls: {len(bindings)} ACLs created or already there for {names}")
    return 0
