"""The Kafka ACLs a job's services need, and nothing more: the coordinator's principal and
the workers' are kept apart, because the workers run user code.

What the code does, and the ACL each call needs (READ, WRITE and DELETE each imply DESCRIBE,
which metadata, ListOffsets and OffsetFetch need; CREATE and ALTER_CONFIGS do not):

The coordinator (``runtime/coordinator.py``, ``lease.py``, ``job_topics.py``,
``job_savepoint.py``):

- creates the job's topics at every start: ``<job>.control``, ``.checkpoints``, ``.dlq``,
  ``.late``, the shuffles and feedback topics, the sinks (CREATE, and DESCRIBE to see them);
  sets the retention of ``.dlq`` and ``.late`` (ALTER_CONFIGS);
- reads and writes ``<job>.control`` (assignments, triggers, its lease) and
  ``<job>.checkpoints`` (the completed checkpoints) (READ, WRITE);
- counts the sources' partitions, and on a first start from a savepoint commits its positions
  as the group ``<job>``'s (OffsetCommit: READ on the group and on each source topic);
- holds the lease in transactions of the id ``<job>.coordinator`` (WRITE);
- consumers that only ``assign`` (groups ``<job>.coordinator``, ``.lease-<uuid>``, and the
  CLI's ``.cli``, ``.tail``, ``.reader``): librdkafka looks their coordinator up (DESCRIBE on
  the prefix ``<job>.``).

The workers (``runtime/worker.py``, the tasks):

- consume the sources and the shuffles (READ), write the shuffles, the sinks, ``<job>.dlq`` and
  ``<job>.late`` in their tasks' transactions (WRITE), purge the shuffles (DeleteRecords:
  DELETE); read and write ``<job>.control`` (assignments in, heartbeats and acks out);
- transactional ids ``<job>.<stage>-<n>``, one per task: WRITE on the prefix ``<job>.<stage>-``
  of each stage, which cannot cover ``<job>.coordinator`` (a prefix ending in ``-`` matches
  only longer names, and ``coordinator`` has no ``-``);
- the group ``<job>``: each task commits its input positions inside its transaction
  (AddOffsetsToTxn and TxnOffsetCommit check READ on the group) and reads them back at start.
  That READ cannot be taken away without giving up exactly-once: it is also what lets a
  worker's user code commit any position of the group outside a transaction (OffsetCommit),
  which is no more than a task's own transactions can write anyway;
- groups ``<job>.workers`` and ``<job>.credentials-check`` (DESCRIBE), and nothing else: no
  CREATE anywhere, no access to ``<job>.checkpoints``, no WRITE on ``<job>.coordinator``.

The cluster: nothing. A transactional producer needs WRITE on its id, an idempotent one WRITE
on any topic, not IdempotentWrite; DescribeConfigs on the cluster is asked only on three
brokers or more, and without it the job sets ``min.insync.replicas=2`` on its topics itself
(``kafka/replication.py``).

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
from processor.topics import CHECKPOINTS, CONTROL, DLQ, LATE, job_topic

Resource = Literal["topic", "group", "transactional-id", "cluster"]
Pattern = Literal["literal", "prefixed"]
# Kafka's names, as kafka-acls.sh takes them.
Operation = Literal["Read", "Write", "Create", "Delete", "Describe", "AlterConfigs"]
# Whose rule: the coordinator's principal, or the workers' (which run user code); "client":
# the user's own producer and reader (``client_acls``), no service of the job.
Role = Literal["coordinator", "worker", "client"]
ROLES: tuple[Role, ...] = ("coordinator", "worker")


@dataclass(frozen=True)
class AclRule:
    """ALLOW ``operations`` on one resource (pattern) for the principal of ``role``, and
    why."""

    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[Operation, ...]
    why: str
    role: Role = "coordinator"


class _Rules:
    """Rules of one role, one per literal resource: a topic that is both source and sink gets
    one rule with both's operations."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self._held: dict[tuple[Resource, str, Pattern], tuple[list[Operation], list[str]]] = {}

    def add(
        self,
        name: str,
        ops: Sequence[Operation],
        why: str,
        resource: Resource = "topic",
        pattern: Pattern = "literal",
    ) -> None:
        held, whys = self._held.setdefault((resource, name, pattern), ([], []))
        held.extend(op for op in ops if op not in held)
        if why not in whys:
            whys.append(why)

    def rules(self) -> list[AclRule]:
        return [
            AclRule(resource, name, pattern, tuple(ops), "; ".join(whys), self.role)
            for (resource, name, pattern), (ops, whys) in self._held.items()
        ]


def job_acls(
    job: str,
    sources: Iterable[str],
    sinks: Iterable[str],
    shuffles: Iterable[str],
    purge: bool = True,
    timed: bool = False,
    stages: Iterable[str] = ("split", "count"),
) -> list[AclRule]:
    """The rules the services of job ``job`` need: the coordinator's, then the workers'.

    ``shuffles``: its shuffle and feedback topics (a pipeline may name one outside
    ``<job>.``); ``purge``: whether the tasks purge them (a purge interval > 0); ``timed``:
    whether it has event-time stages (and so a ``<job>.late`` topic); ``stages``: the names of
    its stages, whose tasks' transactional ids are ``<job>.<stage>-<n>`` (the word count's by
    default).
    """
    topics = _JobTopics(
        job,
        sorted(set(sources)),
        sorted(set(sinks)),
        sorted(set(shuffles)),
        [job_topic(job, DLQ), *([job_topic(job, LATE)] if timed else [])],
    )
    return _coordinator_rules(topics) + _worker_rules(topics, purge, stages)


@dataclass(frozen=True)
class _JobTopics:
    """A job's topics, by who creates and who writes them; ``kept``: the DLQ (and the late
    records' topic), whose retention the coordinator sets."""

    job: str
    sources: list[str]
    sinks: list[str]
    shuffles: list[str]
    kept: list[str]

    @property
    def prefix(self) -> str:
        return f"{self.job}."


def _coordinator_rules(topics: _JobTopics) -> list[AclRule]:
    """The coordinator's: it creates the job's topics, runs its control and checkpoints
    topics, and holds the lease."""
    job, prefix = topics.job, topics.prefix
    c = _Rules("coordinator")
    for topic in topics.sources:
        c.add(
            topic,
            ["Read"],
            "source: partitions counted; a savepoint's positions committed as the group's "
            "(OffsetCommit checks Read on the topic)",
        )
    for topic in topics.sinks:
        c.add(topic, ["Create", "Describe"], "sink: created if missing")
    for topic in topics.shuffles:
        c.add(topic, ["Create", "Describe"], "shuffle: created if missing")
    control, checkpoints = job_topic(job, CONTROL), job_topic(job, CHECKPOINTS)
    c.add(control, ["Create", "Read", "Write"], "assignments, triggers, its lease; heartbeats in")
    c.add(checkpoints, ["Create", "Read", "Write"], "the completed checkpoints: its alone")
    for topic in topics.kept:
        c.add(
            topic,
            ["Create", "Describe", "AlterConfigs"],
            "created if missing; retention.ms set at each start (PROCESSOR_DLQ_RETENTION_MS, "
            "_LATE_), without AlterConfigs a warning and the topic keeps its own",
        )
    c.add(
        job,
        ["Read"],
        "on a first start from a savepoint, its positions committed as the job's",
        "group",
    )
    c.add(
        prefix,
        ["Describe"],
        f"consumers that only assign ({prefix}coordinator, .lease-<uuid>; the CLI's .cli, "
        ".tail, .reader)",
        "group",
        "prefixed",
    )
    c.add(
        f"{prefix}coordinator",
        ["Write"],
        "the lease: only one coordinator runs, a new one fences the old",
        "transactional-id",
    )
    return c.rules()


def _worker_rules(topics: _JobTopics, purge: bool, stages: Iterable[str]) -> list[AclRule]:
    """The workers': their tasks read and write in transactions of their own ids."""
    job, prefix = topics.job, topics.prefix
    w = _Rules("worker")
    for topic in topics.sources:
        w.add(topic, ["Read"], "source: consumed")
    for topic in topics.sinks:
        w.add(topic, ["Write"], "sink: written in the tasks' transactions")
    for topic in topics.shuffles:
        w.add(topic, ["Read", "Write"], "shuffle: written and consumed in transactions")
        if purge:
            w.add(topic, ["Delete"], "records no snapshot needs purged (DeleteRecords)")
    w.add(
        job_topic(job, CONTROL),
        ["Read", "Write"],
        "assignments and triggers in; heartbeats, acks out",
    )
    for topic in topics.kept:
        w.add(topic, ["Write"], "dead (and late) records, written in the tasks' transactions")
    w.add(
        job,
        ["Read"],
        "the tasks' input positions: committed in their transactions (TxnOffsetCommit needs "
        "Read on the group: exactly-once cannot do without it), read back at start",
        "group",
    )
    for group in (f"{prefix}workers", f"{prefix}credentials-check"):
        w.add(group, ["Describe"], "a consumer that only assigns", "group")
    for stage in dict.fromkeys(stages):
        w.add(
            f"{prefix}{stage}-",
            ["Write"],
            f"one per task of stage {stage} ({prefix}{stage}-<n>); never {prefix}coordinator",
            "transactional-id",
            "prefixed",
        )
    return w.rules()


def client_acls(job: str, sources: Iterable[str], sinks: Iterable[str]) -> list[AclRule]:
    """The rules of the user's own producer and reader, not of the job: write and read the
    sources (``processor produce``; a direct count of the input), read the sinks
    (``processor counts`` and ``tail``, consumers that only assign: Describe on their group)."""
    r = _Rules("client")
    for topic in sorted(set(sources)):
        r.add(topic, ["Read", "Write"], "source: the input, produced and read back")
    for topic in sorted(set(sinks)):
        r.add(topic, ["Read"], "sink: the output, read")
    for group in (f"{job}.reader", f"{job}.tail"):
        r.add(group, ["Describe"], "processor counts / tail: a consumer that only assigns", "group")
    return r.rules()


def graph_acls(settings: Settings, graph: JobGraph) -> list[AclRule]:
    """The rules of the job ``graph`` runs as, with ``settings``."""
    return job_acls(
        settings.job_name,
        graph.plan.source_topics,
        graph.plan.sink_topics,
        graph.shuffle_topics,
        purge=settings.shuffle_purge_interval_ms > 0,
        timed=graph.plan.timed,
        stages=[s.name for s in graph.stages],
    )


def of(rules: Iterable[AclRule], role: Role) -> list[AclRule]:
    """The rules of ``role``'s principal."""
    return [r for r in rules if r.role == role]


def combined(rules: Iterable[AclRule]) -> list[AclRule]:
    """The rules of one principal that both roles share (the single-principal mode): a
    resource both need gets one rule with both's operations."""
    merged = _Rules("coordinator")
    for r in rules:
        merged.add(r.name, r.operations, f"{r.role}: {r.why}", r.resource, r.pattern)
    return merged.rules()


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
    """A shell script: each rule's command for ``principal`` after a comment saying why."""
    lines = []
    for rule in rules:
        lines.append(f"# {rule.why}")
        lines.append(command(rule, principal, bootstrap, config_file))
    return "\n".join(lines) + "\n"


def render_split(
    rules: Sequence[AclRule], coordinator: str, worker: str, bootstrap: str, config_file: str = ""
) -> str:
    """The script granting the coordinator's rules to ``coordinator`` and the workers' to
    ``worker``."""
    return (
        f"## The coordinator's principal, {coordinator}\n"
        + render(of(rules, "coordinator"), coordinator, bootstrap, config_file)
        + f"\n## The workers' principal, {worker} (they run user code: no Create, nothing on "
        ".checkpoints, not the coordinator's transactional id)\n"
        + render(of(rules, "worker"), worker, bootstrap, config_file)
    )


def table(rules: Iterable[AclRule], roles: bool = True) -> str:
    """The rules as a Markdown table (the one in docs/operations.md, Security); ``roles``: with
    a column saying whose principal each rule is for."""
    head = "| Principal | Resource | Name | Pattern | Operations | Why |"
    if not roles:
        head = head.removeprefix("| Principal ")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rules:
        ops = ", ".join(r.operations)
        whose = f"| {r.role} " if roles else ""
        lines.append(f"{whose}| {r.resource} | `{r.name}` | {r.pattern} | {ops} | {r.why} |")
    return "\n".join(lines) + "\n"
