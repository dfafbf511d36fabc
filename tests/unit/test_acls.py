"""The ACL list of a job (processor/kafka/acls.py), its commands, the `processor acls` command,
and the broker settings of the ACL authorizer. tests/integration/test_acls.py shows on a real
broker that the list is enough and that a missing rule stops the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    ResourcePatternType,
    ResourceType,
)

from processor import cli
from processor.config import Settings
from processor.jobs import load_graph
from processor.kafka import acls, clients
from processor.localkafka.broker import LocalBroker

Row = tuple[str, str, str, str, tuple[str, ...]]


def _rows(rules: list[acls.AclRule]) -> list[Row]:
    return [(r.role, r.resource, r.name, r.pattern, r.operations) for r in rules]


def test_word_count_needs_its_topics_groups_and_transactional_ids() -> None:
    settings = Settings(job_name="wc", input_topic="words", output_topic="counts")
    assert _rows(acls.graph_acls(settings, load_graph(settings))) == [
        ("coordinator", "topic", "words", "literal", ("Read",)),
        ("coordinator", "topic", "counts", "literal", ("Create", "Describe")),
        ("coordinator", "topic", "wc.shuffle", "literal", ("Create", "Describe")),
        ("coordinator", "topic", "wc.control", "literal", ("Create", "Read", "Write")),
        ("coordinator", "topic", "wc.checkpoints", "literal", ("Create", "Read", "Write")),
        ("coordinator", "topic", "wc.dlq", "literal", ("Create", "Describe", "AlterConfigs")),
        ("coordinator", "group", "wc", "literal", ("Read",)),
        ("coordinator", "group", "wc.", "prefixed", ("Describe",)),
        ("coordinator", "transactional-id", "wc.coordinator", "literal", ("Write",)),
        ("worker", "topic", "words", "literal", ("Read",)),
        ("worker", "topic", "counts", "literal", ("Write",)),
        ("worker", "topic", "wc.shuffle", "literal", ("Read", "Write", "Delete")),
        ("worker", "topic", "wc.control", "literal", ("Read", "Write")),
        ("worker", "topic", "wc.dlq", "literal", ("Write",)),
        ("worker", "group", "wc", "literal", ("Read",)),
        ("worker", "group", "wc.workers", "literal", ("Describe",)),
        ("worker", "group", "wc.credentials-check", "literal", ("Describe",)),
        ("worker", "transactional-id", "wc.split-", "prefixed", ("Write",)),
        ("worker", "transactional-id", "wc.count-", "prefixed", ("Write",)),
    ]


def _covers(rule: acls.AclRule, resource: str, name: str) -> bool:
    """Whether the broker would apply ``rule`` to ``name`` (Kafka's literal and prefixed
    matching)."""
    if rule.resource != resource:
        return False
    return name.startswith(rule.name) if rule.pattern == "prefixed" else name == rule.name


# Stage names that come close to the coordinator's id; and a loop (feedback topics).
@pytest.mark.parametrize("stages", [["split", "count"], ["coordinator", "coordinator-x", "c"]])
def test_a_worker_can_touch_neither_checkpoints_nor_the_lease_and_creates_nothing(
    stages: list[str],
) -> None:
    rules = acls.job_acls("wc", ["in"], ["out"], ["wc.s", "wc.l.feedback"], True, True, stages)
    workers = acls.of(rules, "worker")
    assert not [r for r in workers if _covers(r, "topic", "wc.checkpoints")]
    assert not [r for r in workers if _covers(r, "transactional-id", "wc.coordinator")]
    assert not [r for r in workers if {"Create", "AlterConfigs"} & set(r.operations)]
    # Yet each task's own transactional id, and what exactly-once needs, are there.
    for stage in stages:
        assert [r for r in workers if _covers(r, "transactional-id", f"wc.{stage}-3")]
    assert [r for r in workers if _covers(r, "group", "wc") and r.operations == ("Read",)]
    for topic in ["wc.s", "wc.l.feedback", "wc.late", "wc.dlq", "out"]:
        assert [r for r in workers if _covers(r, "topic", topic) and "Write" in r.operations]
    coordinator = acls.of(rules, "coordinator")
    assert [r for r in coordinator if _covers(r, "transactional-id", "wc.coordinator")]
    assert not [r for r in coordinator if _covers(r, "transactional-id", "wc.s-0")]


def test_no_purge_no_delete() -> None:
    rows = _rows(acls.job_acls("wc", ["words"], ["counts"], ["wc.shuffle"], purge=False))
    assert all("Delete" not in ops for *_, ops in rows)


def test_retention_of_the_dlq_and_late_topics_is_set_at_start() -> None:
    rows = _rows(acls.job_acls("wc", ["in"], ["out"], [], timed=True))
    assert (
        "coordinator",
        "topic",
        "wc.late",
        "literal",
        ("Create", "Describe", "AlterConfigs"),
    ) in rows
    assert ("worker", "topic", "wc.late", "literal", ("Write",)) in rows
    binding = acls.bindings(acls.job_acls("wc", ["in"], ["out"], []), "User:svc")
    alter = AclOperation.ALTER_CONFIGS
    assert any(b.name == "wc.dlq" and b.operation == alter for b in binding)


def test_a_shuffle_named_outside_the_prefix_and_a_topic_both_source_and_sink() -> None:
    rows = _rows(acls.of(acls.job_acls("wc", ["loop", "in"], ["loop"], ["by-user"]), "worker"))
    assert rows[:3] == [
        ("worker", "topic", "in", "literal", ("Read",)),
        ("worker", "topic", "loop", "literal", ("Read", "Write")),
        ("worker", "topic", "by-user", "literal", ("Read", "Write", "Delete")),
    ]


def test_a_pipeline_file_names_each_of_its_shuffles_and_stages(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(
        "from processor import Pipeline\n"
        "pipeline = Pipeline()\n"
        "pipeline.source('a').key_by(len).count().sink('b')\n"
    )
    settings = Settings(job_name="j", pipeline=f"{path}:pipeline")
    graph = load_graph(settings)
    rows = _rows(acls.graph_acls(settings, graph))
    assert ("worker", "topic", "j.a.key_by", "literal", ("Read", "Write", "Delete")) in rows
    for stage in graph.stages:
        txn = ("worker", "transactional-id", f"j.{stage.name}-", "prefixed", ("Write",))
        assert txn in rows


def test_one_principal_gets_both_roles_rights_merged() -> None:
    rules = acls.job_acls("wc", ["words"], ["counts"], ["wc.shuffle"])
    merged = acls.combined(rules)
    by_name = {(r.resource, r.name): r.operations for r in merged}
    assert by_name[("topic", "counts")] == ("Create", "Describe", "Write")
    assert by_name[("topic", "wc.control")] == ("Create", "Read", "Write")
    assert len(by_name) == len(merged)  # one rule per resource
    held = {(r.resource, r.name, op) for r in rules for op in r.operations}
    assert held == {(r.resource, r.name, op) for r in merged for op in r.operations}


def test_commands_and_bindings() -> None:
    rules = acls.job_acls("wc", ["words"], ["counts"], ["wc.shuffle"])
    script = acls.render_split(rules, "User:coord", "User:work", "k:9092", "admin.properties")
    lines = script.splitlines()
    assert (
        "kafka-acls.sh --bootstrap-server k:9092 --command-config admin.properties --add "
        "--allow-principal User:coord --operation Create --operation Read --operation Write "
        "--topic wc.checkpoints --resource-pattern-type literal"
    ) in lines
    assert (
        "kafka-acls.sh --bootstrap-server k:9092 --command-config admin.properties --add "
        "--allow-principal User:work --operation Write "
        "--transactional-id wc.count- --resource-pattern-type prefixed"
    ) in lines
    assert script.count("kafka-acls.sh") == len(rules)
    assert not [x for x in lines if "User:work" in x and "--topic wc.checkpoints" in x]
    bindings = acls.bindings(acls.of(rules, "coordinator"), "User:coord")
    assert len(bindings) == sum(len(r.operations) for r in acls.of(rules, "coordinator"))
    txn = [b for b in bindings if b.restype == ResourceType.TRANSACTIONAL_ID]
    assert [(b.name, b.resource_pattern_type, b.operation) for b in txn] == [
        ("wc.coordinator", ResourcePatternType.LITERAL, AclOperation.WRITE)
    ]
    assert {b.principal for b in bindings} == {"User:coord"}


def test_cli_prints_the_commands_or_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["acls", "--job-name", "wc", "--bootstrap-servers", "k:1"]
    two = ["--coordinator-principal", "User:c", "--worker-principal", "User:w"]
    assert cli.main([*common, *two]) == 0
    out = capsys.readouterr().out
    assert "--allow-principal User:c" in out and "--transactional-id wc.coordinator" in out
    assert "--allow-principal User:w --operation Write --transactional-id wc.split-" in out
    assert cli.main([*common, "--table"]) == 0
    table = capsys.readouterr().out
    assert "| coordinator | transactional-id | `wc.coordinator` | literal | Write |" in table
    assert "| worker | transactional-id | `wc.count-` | prefixed | Write |" in table
    # One principal for both, as before the split: every right of each.
    assert cli.main([*common, "--principal", "User:svc"]) == 0
    out = capsys.readouterr().out
    assert "--allow-principal User:svc" in out and "--transactional-id wc.coordinator" in out
    assert "--transactional-id wc.split-" in out
    assert cli.main([*common, "--principal", "User:svc", "--table"]) == 0
    assert "| transactional-id | `wc.coordinator` | literal | Write |" in capsys.readouterr().out
    # Half a pair, or both kinds at once: an error, not a table for the wrong principal.
    for wrong in [[], two[:2], two[2:], [*two, "--principal", "User:svc"]]:
        assert cli.main([*common, *wrong]) == 2
        assert "--worker-principal" in capsys.readouterr().err


def test_broker_acl_authorizer_settings(tmp_path: Path) -> None:
    def props(acl_authorizer: bool = False) -> dict[str, str]:
        broker = LocalBroker(data_dir=tmp_path, acl_authorizer=acl_authorizer)
        lines = broker._server_properties().splitlines()
        return dict(x.split("=", 1) for x in lines if not x.startswith("#"))

    assert "authorizer.class.name" not in props()
    on = props(acl_authorizer=True)
    assert on["authorizer.class.name"].endswith("StandardAuthorizer")
    assert on["super.users"] == "User:ANONYMOUS"
    assert on["allow.everyone.if.no.acl.found"] == "false"


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    ],
)
def test_a_denied_operation_is_a_setting_error_naming_the_command(code: int) -> None:
    settings = Settings(bootstrap_servers="k:1")
    with pytest.raises(clients.AccessDenied, match=r"^Kafka at k:1 denied .*processor acls"):
        clients.check_denied(settings, KafkaException(KafkaError(code)))


def test_other_errors_are_not_denials() -> None:
    settings = Settings()
    clients.check_denied(settings, KafkaException(KafkaError(KafkaError._TRANSPORT)))
    clients.check_denied(settings, TimeoutError("no broker"))


def test_cli_applies_the_split_rules_and_the_clients(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`processor acls --apply` (the compose stack's `acls` step): every binding of the
    coordinator's, the workers' and the user's own client's rules, through the admin API."""
    created: list[Any] = []

    class Done:
        def result(self, timeout: float) -> None:
            return None

    class Admin:
        def create_acls(self, bindings: list[Any], request_timeout: float) -> dict[Any, Done]:
            created.extend(bindings)
            return {b: Done() for b in bindings}

    monkeypatch.setattr(clients, "admin", lambda settings: Admin())
    common = ["acls", "--job-name", "wc", "--bootstrap-servers", "k:1"]
    two = ["--coordinator-principal", "User:c", "--worker-principal", "User:w"]
    assert cli.main([*common, *two, "--client-principal", "User:u", "--apply"]) == 0
    assert "created or already there for User:c, User:w, User:u" in capsys.readouterr().out
    held = {(b.principal, b.name, b.operation) for b in created}
    assert ("User:c", "wc.checkpoints", AclOperation.WRITE) in held
    assert ("User:w", "wc.checkpoints", AclOperation.WRITE) not in held
    assert ("User:u", "words", AclOperation.WRITE) in held
    assert ("User:u", "word-counts", AclOperation.READ) in held
    assert not [
        b
        for b in created
        if b.principal == "User:u" and b.name.startswith("wc.") and b.restype == ResourceType.TOPIC
    ]
    # The client's rules print as commands of their own; half a pair still refused.
    assert cli.main([*common, *two, "--client-principal", "User:u"]) == 0
    assert "--allow-principal User:u --operation Read --operation Write --topic words" in (
        capsys.readouterr().out
    )
    assert cli.main([*common, "--client-principal", "User:u", "--apply"]) == 2
