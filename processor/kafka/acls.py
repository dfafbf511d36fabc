"""The Kafka ACLs a job's services (coordinator and workers) need, and nothing more.

What the code does, and the ACL each call needs (READ, WRITE, CREATE and DELETE each imply
DESCRIBE, which metadata, ListOffsets and OffsetFetch need):

- source topics: consumed (READ); the coordinator reads their partition counts.
- sink topics: written in the tasks' transactions (WRITE); created when missing (CREATE).
- internal topics ``<job>.control``, ``.checkpoints``, ``.dlq``, ``.late`` and the shuffles
  ``<job>.<stage>``: created by the coordinator (CREATE), written and read by every service.
  A shuffle is also purged below what no snapshot needs (``delete_records``: DELETE).
- group ``<job>``: the tasks' input positions, committed inside their transactions
  (TxnOffsetCommit), read back at start (OffsetFetch), set from a savepoint (OffsetCommit).
- groups ``<job>.*`` (``.coordinator``, ``.workers``, ``.lease-<uuid>``): consumers that only
  ``assign``, never commit; librdkafka still looks their coordinator up (DESCRIBE).
- transactional ids ``<job>.<stage>-<n>`` (one per task) and ``<job>.coordinator`` (the lease):
  WRITE.
- the cluster: nothing. A transactional producer needs WRITE on its id, not IdempotentWrite;
  DescribeConfigs on the cluster is asked only on three brokers or more, and without it the
  job sets ``min.insync.replicas=2`` on its topics itself (``kafka/replication.py``).

Prefixed ACLs on ``<job>.`` are safe because job names have no dots (``config.py``): the
prefix of job ``a`` cannot cover job ``a-b``'s or ``a.b``'s resources. Pure: nothing here
talks to Kafka.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from processor.config import Settings
from processor.jobs.graph import JobGraph

Resource = Literal["topic", "group", "transactional-id", "cluster"]
Pattern = Literal["literal", "prefixed"]
# Kafka's names, as kafka-acls.sh takes them.
Operation = Literal["Read", "Write", "Create", "Delete", "Describe", "AlterConfigs"]


@dataclass(frozen=True)
class AclRule:
    """ALLOW ``operations`` on one resource (pattern) for the job's principal, and why."""

    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[Operation, ...]
    why: str


def job_acls(
    job: str,
    sources: Iterable[str],
    sinks: Iterable[str],
    shuffles: Iterable[str],
    purge: bool = True,
    timed: bool = False,
) -> list[AclRule]:
    """The rules the services of job ``job`` need; ``shuffles``: its shuffle topics (a pipeline
    may name one outside ``<job>.``); ``purge``: whether it purges them (a purge interval > 0);
    ``timed``: whether it has event-time stages (and so a ``<job>.late`` topic).
    """
    prefix = f"{job}."
    rules: list[AclRule] = []
    # A topic may be both (a pipeline reading its own sink): one rule with both's operations.
    literal: dict[str, tuple[list[Operation], list[str]]] = {}

    def add(topic: str, ops: Sequence[Operation], why: str) -> None:
        held, whys = literal.setdefault(topic, ([], []))
        held.extend(op for op in ops if op not in held)
        whys.append(why)

    # Topics under the prefix get what the prefixed rule below gives them already.
    for topic in sorted(set(sources)):
        if not topic.startswith(prefix):
            add(topic, ["Read"], "source: consumed, partitions counted")
    for topic in sorted(set(sinks)):
        if not topic.startswith(prefix):
            add(topic, ["Write", "Create"], "sink: written in transactions, created if missing")
    for topic in sorted(set(shuffles)):
        if not topic.startswith(prefix):
            add(topic, ["Create", "Read", "Write"], "shuffle named by the pipeline")
        if purge:
            add(topic, ["Delete"], "shuffle: records no snapshot needs are purged (DeleteRecords)")
    for topic in [f"{prefix}dlq", *([f"{prefix}late"] if timed else [])]:
        add(
            topic,
            ["AlterConfigs"],
            "retention.ms set at each start (PROCESSOR_DLQ_RETENTION_MS, _LATE_); "
            "without it, a warning and the topic keeps its own",
        )
    for topic, (ops, whys) in literal.items():
        rules.append(AclRule("topic", topic, "literal", tuple(ops), "; ".join(whys)))
    rules += [
        AclRule(
            "topic",
            prefix,
            "prefixed",
            ("Create", "Read", "Write"),
            f"internal topics {prefix}control, .checkpoints, .dlq, .late, shuffles "
            f"{prefix}<stage>: created at start, written and read by every service",
        ),
        AclRule(
            "group",
            job,
            "literal",
            ("Read",),
            "the tasks' input positions: committed in their transactions, read at start",
        ),
        AclRule(
            "group",
            prefix,
            "prefixed",
            ("Describe",),
            f"consumers that only assign ({prefix}coordinator, .workers, .lease-<uuid>)",
        ),
        AclRule(
            "transactional-id",
            prefix,
            "prefixed",
            ("Write",),
            f"one per task ({prefix}<stage>-<n>) and the coordinator's lease ({prefix}coordinator)",
        ),
    ]
    return rules


def graph_acls(settings: Settings, graph: JobGraph) -> list[AclRule]:
    """The rules of the job ``graph`` runs as, with ``settings``."""
    return job_acls(
        settings.job_name,
        graph.plan.source_topics,
        graph.plan.sink_topics,
        graph.shuffle_topics,
        purge=settings.shuffle_purge_interval_ms > 0,
        timed=graph.plan.timed,
    )


_KAFKA_NAMES = {"AlterConfigs": "ALTER_CONFIGS"}  # AclOperation's names that are not upper()


def bindings(rules: Iterable[AclRule], principal: str) -> list[AclBinding]:
    """The rules as ``AdminClient.create_acls`` takes them: one binding per operation, any
    host."""
    return [
        AclBinding(
            _RESOURCE[r.resource],
            "kafka-cluster" if r.resource == "cluster" else r.name,
            _PATTERN[r.pattern],
            principal,
            "*",
            AclOperation[_KAFKA_NAMES.get(op, op.upper())],
            AclPermissionType.ALLOW,
        )
        for r in rules
        for op in r.operations
    ]


_RESOURCE = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,
}
_PATTERN = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}


def command(rule: AclRule, principal: str, bootstrap: str, config_file: str = "") -> str:
    """The ``kafka-acls.sh`` command that grants ``rule`` to ``principal``; ``config_file``:
    its ``--command-config`` (the admin's own credentials)."""
    args = ["kafka-acls.sh", "--bootstrap-server", bootstrap]
    if config_file:
        args += ["--command-config", config_file]
    args += ["--add", "--allow-principal", principal]
    for op in rule.operations:
        args += ["--operation", op]
    if rule.resource == "cluster":
        args.append("--cluster")
    else:
        args += [f"--{rule.resource}", rule.name]
    args += ["--resource-pattern-type", rule.pattern]
    return shlex.join(args)


def render(rules: Iterable[AclRule], principal: str, bootstrap: str, config_file: str = "") -> str:
    """A shell script: each rule's command after a comment saying why."""
    lines = []
    for rule in rules:
        lines.append(f"# {rule.why}")
        lines.append(command(rule, principal, bootstrap, config_file))
    return "\n".join(lines) + "\n"


def table(rules: Iterable[AclRule]) -> str:
    """The rules as a Markdown table (the one in docs/operations.md, Security)."""
    lines = ["| Resource | Name | Pattern | Operations | Why |", "|---|---|---|---|---|"]
    for r in rules:
        ops = ", ".join(r.operations)
        lines.append(f"| {r.resource} | `{r.name}` | {r.pattern} | {ops} | {r.why} |")
    return "\n".join(lines) + "\n"
