"""The ACL list of a job (processor/kafka/acls.py), its commands, the `processor acls` command,
and the broker settings of the ACL authorizer. tests/integration/test_acls.py shows on a real
broker that the list is enough and that a missing rule stops the job."""

from __future__ import annotations

from pathlib import Path

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
from processor.kafka.broker import LocalBroker

Row = tuple[str, str, str, tuple[str, ...]]


def _rows(rules: list[acls.AclRule]) -> list[Row]:
    return [(r.resource, r.name, r.pattern, r.operations) for r in rules]


_JOB_RULES: list[Row] = [
    ("topic", "wc.", "prefixed", ("Create", "Read", "Write")),
    ("group", "wc", "literal", ("Read",)),
    ("group", "wc.", "prefixed", ("Describe",)),
    ("transactional-id", "wc.", "prefixed", ("Write",)),
]


def test_word_count_needs_its_topics_group_and_transactional_ids() -> None:
    settings = Settings(job_name="wc", input_topic="words", output_topic="counts")
    assert _rows(acls.graph_acls(settings, load_graph(settings))) == [
        ("topic", "words", "literal", ("Read",)),
        ("topic", "counts", "literal", ("Write", "Create")),
        ("topic", "wc.shuffle", "literal", ("Delete",)),
        ("topic", "wc.dlq", "literal", ("AlterConfigs",)),
        *_JOB_RULES,
    ]


def test_no_purge_no_delete() -> None:
    rows = _rows(acls.job_acls("wc", ["words"], ["counts"], ["wc.shuffle"], purge=False))
    assert all("Delete" not in ops for *_, ops in rows)


def test_topics_under_the_prefix_get_only_what_the_prefix_lacks() -> None:
    rows = _rows(acls.job_acls("wc", ["wc.in"], ["wc.out"], ["wc.shuffle"]))
    assert rows == [
        ("topic", "wc.shuffle", "literal", ("Delete",)),
        ("topic", "wc.dlq", "literal", ("AlterConfigs",)),
        *_JOB_RULES,
    ]


def test_retention_of_the_dlq_and_late_topics_is_set_at_start() -> None:
    rows = _rows(acls.job_acls("wc", ["in"], ["out"], [], timed=True))
    assert ("topic", "wc.late", "literal", ("AlterConfigs",)) in rows
    binding = acls.bindings(acls.job_acls("wc", ["in"], ["out"], []), "User:svc")
    alter = AclOperation.ALTER_CONFIGS
    assert any(b.name == "wc.dlq" and b.operation == alter for b in binding)


def test_a_shuffle_named_outside_the_prefix_and_a_topic_both_source_and_sink() -> None:
    rows = _rows(acls.job_acls("wc", ["loop", "in"], ["loop"], ["by-user"]))
    assert rows[:3] == [
        ("topic", "in", "literal", ("Read",)),
        ("topic", "loop", "literal", ("Read", "Write", "Create")),
        ("topic", "by-user", "literal", ("Create", "Read", "Write", "Delete")),
    ]


def test_a_pipeline_file_names_each_of_its_shuffles(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(
        "from processor import Pipeline\n"
        "pipeline = Pipeline()\n"
        "pipeline.source('a').key_by(len).count().sink('b')\n"
    )
    settings = Settings(job_name="j", pipeline=f"{path}:pipeline")
    rows = _rows(acls.graph_acls(settings, load_graph(settings)))
    assert ("topic", "j.a.key_by", "literal", ("Delete",)) in rows


def test_commands_and_bindings() -> None:
    rules = acls.job_acls("wc", ["words"], ["counts"], ["wc.shuffle"])
    script = acls.render(rules, "User:svc", "k:9092", "admin.properties")
    assert (
        "kafka-acls.sh --bootstrap-server k:9092 --command-config admin.properties --add "
        "--allow-principal User:svc --operation Create --operation Read --operation Write "
        "--topic wc. --resource-pattern-type prefixed"
    ) in script.splitlines()
    assert script.count("kafka-acls.sh") == len(rules)
    bindings = acls.bindings(rules, "User:svc")
    assert len(bindings) == sum(len(r.operations) for r in rules)
    txn = [b for b in bindings if b.restype == ResourceType.TRANSACTIONAL_ID]
    assert [(b.name, b.resource_pattern_type, b.operation) for b in txn] == [
        ("wc.", ResourcePatternType.PREFIXED, AclOperation.WRITE)
    ]
    assert {b.principal for b in bindings} == {"User:svc"}


def test_cli_prints_the_commands_or_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["acls", "--principal", "User:svc", "--job-name", "wc", "--bootstrap-servers", "k:1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "--allow-principal User:svc" in out and "--transactional-id wc." in out
    assert cli.main([*argv, "--table"]) == 0
    assert "| transactional-id | `wc.` | prefixed | Write |" in capsys.readouterr().out


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
