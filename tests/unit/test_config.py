"""Settings: PROCESSOR_* environment, overrides (CLI flags) on top, one-line errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from processor.config import S3Location, Settings, SettingsError, default_state_root, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PROCESSOR_* variable of the developer's shell (or the test session) leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("PROCESSOR_"):
            monkeypatch.delenv(name)


def _error(**overrides: Any) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(**overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("invalid setting ")
    # The pydantic error is not chained in: the one line is all there is to print.
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    return message


# --- reading ------------------------------------------------------------------------------------


def test_defaults() -> None:
    s = load_settings()
    assert s.bootstrap_servers == "127.0.0.1:9092"
    assert s.job_name == "wordcount"
    assert s.pipeline == ""
    assert s.input_topic == "words"
    assert s.output_topic == "word-counts"
    assert s.shuffle_partitions == 8
    assert s.checkpoint_interval_ms == 1000
    assert s.checkpoint_timeout_ms == 60_000
    assert s.state_dir == default_state_root() / "state"  # per user: tests/unit/test_dirs.py
    assert s.checkpoint_dir == default_state_root() / "checkpoints"
    assert s.retained_checkpoints == 2
    assert s.worker_id == ""
    assert s.metrics_port == 0
    assert s.kafka_config == {}
    assert s.log_level == "INFO"
    assert s.s3_endpoint_url == s.s3_region == ""
    assert s.s3_access_key_id.get_secret_value() == s.s3_secret_access_key.get_secret_value() == ""


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_BOOTSTRAP_SERVERS", "kafka-1:9092,kafka-2:9092")
    monkeypatch.setenv("PROCESSOR_JOB_NAME", "job-v2_x-y")
    monkeypatch.setenv("PROCESSOR_INPUT_TOPIC", "lines")
    monkeypatch.setenv("PROCESSOR_SHUFFLE_PARTITIONS", "32")
    monkeypatch.setenv("PROCESSOR_CHECKPOINT_INTERVAL_MS", "250")
    monkeypatch.setenv("PROCESSOR_STATE_DIR", "/var/lib/processor")
    monkeypatch.setenv("PROCESSOR_WORKER_ID", "worker-7")
    monkeypatch.setenv("PROCESSOR_METRICS_PORT", "9100")
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL"}')
    monkeypatch.setenv("PROCESSOR_LOG_LEVEL", "DEBUG")
    s = load_settings()
    assert s.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert s.job_name == "job-v2_x-y"
    assert s.input_topic == "lines"
    assert s.shuffle_partitions == 32
    assert s.checkpoint_interval_ms == 250
    assert s.state_dir == Path("/var/lib/processor")
    assert s.worker_id == "worker-7"
    assert s.metrics_port == 9100
    assert s.client_config()["security.protocol"] == "SASL_SSL"
    assert s.log_level == "DEBUG"


def test_unrelated_processor_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_TEST_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("PROCESSOR_NO_SUCH_SETTING", "x")
    monkeypatch.setenv("SHUFFLE_PARTITIONS", "3")  # no prefix: not ours
    assert load_settings().shuffle_partitions == 8


def test_overrides_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_SHUFFLE_PARTITIONS", "32")
    monkeypatch.setenv("PROCESSOR_JOB_NAME", "from-env")
    monkeypatch.setenv("PROCESSOR_INPUT_TOPIC", "env-topic")
    s = load_settings(shuffle_partitions=4, job_name="from-flag", state_dir=Path("/x"))
    assert s.shuffle_partitions == 4
    assert s.job_name == "from-flag"
    assert s.state_dir == Path("/x")
    assert s.input_topic == "env-topic"  # not overridden: still the environment's


def test_none_overrides_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_SHUFFLE_PARTITIONS", "32")
    s = load_settings(shuffle_partitions=None, job_name=None, metrics_port=None)
    assert s.shuffle_partitions == 32  # the environment's, not a None
    assert s.job_name == "wordcount"  # the default
    assert s.metrics_port == 0


def test_none_override_of_unknown_name_is_ignored_too() -> None:
    # Flags of other commands arrive as None; they must not trip "extra" validation.
    assert load_settings(no_such_flag=None).job_name == "wordcount"


def test_valid_override_shadows_invalid_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_SHUFFLE_PARTITIONS", "lots")
    assert load_settings(shuffle_partitions=4).shuffle_partitions == 4


def test_override_values_are_coerced() -> None:
    s = load_settings(shuffle_partitions="16", state_dir="/tmp/s", metrics_port=8000)
    assert s.shuffle_partitions == 16
    assert s.state_dir == Path("/tmp/s")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("shuffle_partitions", 1),
        ("shuffle_partitions", 1024),
        ("checkpoint_interval_ms", 50),
        ("checkpoint_interval_ms", 3_600_000),
        ("checkpoint_timeout_ms", 1000),
        ("retained_checkpoints", 1),
        ("retained_checkpoints", 100),
        ("metrics_port", 0),
        ("metrics_port", 65535),
        ("job_name", "a"),
        ("job_name", "x" * 100),
        ("job_name", "A-b_c-9"),
        ("job_name", "savepoints-2"),
    ],
)
def test_boundaries_are_accepted(name: str, value: object) -> None:
    assert getattr(load_settings(**{name: value}), name) == value


# --- errors -------------------------------------------------------------------------------------

INVALID: list[tuple[str, str, str]] = [
    # setting, invalid value, a piece of the message
    ("shuffle_partitions", "0", "greater than or equal to 1"),
    ("shuffle_partitions", "1025", "less than or equal to 1024"),
    ("shuffle_partitions", "many", "valid integer"),
    ("shuffle_partitions", "1.5", "valid integer"),
    ("checkpoint_interval_ms", "49", "greater than or equal to 50"),
    ("checkpoint_interval_ms", "3600001", "less than or equal to 3600000"),
    ("checkpoint_timeout_ms", "999", "greater than or equal to 1000"),
    ("retained_checkpoints", "0", "greater than or equal to 1"),
    ("retained_checkpoints", "101", "less than or equal to 100"),
    ("heartbeat_interval_ms", "9", "greater than or equal to 10"),
    ("worker_timeout_ms", "99", "greater than or equal to 100"),
    ("consume_batch", "0", "greater than or equal to 1"),
    ("flush_keys", "0", "greater than or equal to 1"),
    ("transaction_timeout_ms", "999", "greater than or equal to 1000"),
    ("metrics_port", "-1", "greater than or equal to 0"),
    ("metrics_port", "65536", "less than or equal to 65535"),
    ("job_name", "has space", "should match pattern"),
    ("job_name", "slash/name", "should match pattern"),
    ("job_name", "", "should match pattern"),
    ("job_name", "x" * 101, "should match pattern"),
    # Issue 25: a dot let a prefixed ACL on "a." cover job "a.b", ".." made state/../task.
    ("job_name", "a.b", "should match pattern"),
    ("job_name", "..", "should match pattern"),
    ("job_name", "-x", "should match pattern"),
    ("job_name", "savepoints", "is reserved"),
    ("job_name", "SavePoints", "is reserved"),
    ("bootstrap_servers", "", "must name at least one host:port"),
    ("bootstrap_servers", "   ", "must name at least one host:port"),
    ("checkpoint_dir", "gs://bucket/x", "a directory or an s3://bucket/prefix location"),
    ("checkpoint_dir", "S3://bucket/x", "a directory or an s3://bucket/prefix location"),
    ("checkpoint_dir", "s3://", "the bucket of an s3:// location"),
    ("checkpoint_dir", "s3://ab/x", "the bucket of an s3:// location"),
    ("checkpoint_dir", "s3://Upper/x", "the bucket of an s3:// location"),
    ("checkpoint_dir", "s3://-bucket/x", "the bucket of an s3:// location"),
    ("checkpoint_dir", "s3://bucket_1/x", "the bucket of an s3:// location"),
    ("checkpoint_dir", "s3://bucket/a//b", "empty, '.' or '..' parts"),
    ("checkpoint_dir", "s3://bucket/a/../b", "empty, '.' or '..' parts"),
    ("s3_endpoint_url", "127.0.0.1:9000", "http:// or https:// URL"),
    ("s3_endpoint_url", "ftp://host", "http:// or https:// URL"),
    ("s3_endpoint_url", "http://user:pw@host:9000", "without credentials"),
]


@pytest.mark.parametrize(("name", "value", "detail"), INVALID)
def test_invalid_override_names_the_flag(name: str, value: str, detail: str) -> None:
    message = _error(**{name: value})
    flag = "--" + name.replace("_", "-")
    assert message.startswith(f"invalid setting {flag}: ")
    assert detail in message
    assert "PROCESSOR_" not in message


@pytest.mark.parametrize(("name", "value", "detail"), INVALID)
def test_invalid_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, detail: str
) -> None:
    monkeypatch.setenv("PROCESSOR_" + name.upper(), value)
    message = _error()
    assert message.startswith(f"invalid setting PROCESSOR_{name.upper()}: ")
    assert detail in message
    assert "--" not in message.split(":")[0]


def test_exact_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _error(shuffle_partitions=0) == (
        "invalid setting --shuffle-partitions: Input should be greater than or equal to 1"
    )
    monkeypatch.setenv("PROCESSOR_CHECKPOINT_INTERVAL_MS", "10")
    assert _error() == (
        "invalid setting PROCESSOR_CHECKPOINT_INTERVAL_MS: "
        "Input should be greater than or equal to 50"
    )


def test_error_names_the_source_of_the_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # A valid override of one setting does not get the blame for a bad variable of another.
    monkeypatch.setenv("PROCESSOR_METRICS_PORT", "99999")
    message = _error(shuffle_partitions=4)
    assert message.startswith("invalid setting PROCESSOR_METRICS_PORT: ")


def test_invalid_override_beats_valid_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_SHUFFLE_PARTITIONS", "4")
    assert _error(shuffle_partitions=0).startswith("invalid setting --shuffle-partitions: ")


def test_invalid_override_of_wrong_type() -> None:
    assert _error(kafka_config={"linger.ms": 5}).startswith("invalid setting --kafka-config: ")
    assert _error(state_dir=3).startswith("invalid setting --state-dir: ")


def test_unknown_override_is_rejected() -> None:
    assert _error(shuffle_partitons=3) == (
        "invalid setting --shuffle-partitons: Extra inputs are not permitted"
    )


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "{",
        '{"a": }',
        "security.protocol=SASL_SSL",
    ],
)
def test_kafka_config_that_is_not_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # Regression: pydantic-settings' own SettingsError escaped here (no setting named, not the
    # SettingsError the CLI prints).
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", value)
    message = _error()
    assert message.startswith("invalid setting PROCESSOR_KAFKA_CONFIG: ")


@pytest.mark.parametrize(
    "value",
    ['["a", "b"]', '{"linger.ms": 5}', '{"a": {"b": "c"}}', '"string"', "1"],
)
def test_kafka_config_of_the_wrong_shape(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", value)
    assert _error().startswith("invalid setting PROCESSOR_KAFKA_CONFIG: ")


def test_settings_error_is_an_exception_not_a_pydantic_one() -> None:
    assert issubclass(SettingsError, Exception)
    with pytest.raises(SettingsError):
        load_settings(retained_checkpoints=0)


# --- checkpoint storage ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "bucket", "prefix"),
    [
        ("s3://bucket", "bucket", ""),
        ("s3://bucket/", "bucket", ""),
        ("s3://my.bucket-1/checkpoints", "my.bucket-1", "checkpoints"),
        ("s3://bucket/a/b/c/", "bucket", "a/b/c"),
        ("s3://" + "b" * 63 + "/x", "b" * 63, "x"),
    ],
)
def test_checkpoint_dir_in_s3(value: str, bucket: str, prefix: str) -> None:
    location = load_settings(checkpoint_dir=value).checkpoint_dir
    assert location == S3Location(bucket, prefix)
    assert str(location) == (f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}")
    # What `processor local` hands its children (str(value)) reads back the same.
    assert load_settings(checkpoint_dir=str(location)).checkpoint_dir == location


def test_checkpoint_dir_stays_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(checkpoint_dir="/mnt/shared/chk").checkpoint_dir == Path("/mnt/shared/chk")
    assert load_settings(checkpoint_dir="relative/s3:x").checkpoint_dir == Path("relative/s3:x")
    monkeypatch.setenv("PROCESSOR_CHECKPOINT_DIR", "s3://env-bucket/job")
    assert load_settings().checkpoint_dir == S3Location("env-bucket", "job")


@pytest.mark.parametrize("value", ['{"bucket": "abc", "prefix": "../.."}', "[1]", "{}"])
def test_checkpoint_dir_is_never_json_decoded(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # Whatever the variable holds is a path unless it starts with s3://, and then it is checked.
    monkeypatch.setenv("PROCESSOR_CHECKPOINT_DIR", value)
    assert load_settings().checkpoint_dir == Path(value)


def test_s3_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("PROCESSOR_S3_REGION", "eu-west-1")
    monkeypatch.setenv("PROCESSOR_S3_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID1234")
    monkeypatch.setenv("PROCESSOR_S3_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY")
    s = load_settings()
    assert s.s3_endpoint_url == "http://minio:9000"
    assert s.s3_region == "eu-west-1"
    assert s.s3_access_key_id.get_secret_value() == "AKIAEXAMPLEKEYID1234"
    assert s.s3_secret_access_key.get_secret_value() == "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
    for shown in (repr(s), str(s), str(s.model_dump())):
        assert "AKIAEXAMPLEKEYID1234" not in shown
        assert "wJalrXUtnFEMI" not in shown


@pytest.mark.parametrize("given", ["PROCESSOR_S3_ACCESS_KEY_ID", "PROCESSOR_S3_SECRET_ACCESS_KEY"])
def test_s3_keys_come_in_pairs(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(given, "only-half-of-it")
    message = _error()
    assert "set both PROCESSOR_S3_ACCESS_KEY_ID and this, or neither" in message
    assert "only-half-of-it" not in message


def test_s3_location_errors_do_not_echo_the_value() -> None:
    message = _error(checkpoint_dir="s3://AKIAEXAMPLE:hunter2@bucket/x")
    assert "hunter2" not in message and "AKIAEXAMPLE" not in message


# --- derived names ------------------------------------------------------------------------------


def test_topic_names_follow_the_job_name() -> None:
    s = load_settings(job_name="orders-v1")
    assert s.shuffle_topic == "orders-v1.shuffle"
    assert s.control_topic == "orders-v1.control"
    assert s.checkpoints_topic == "orders-v1.checkpoints"
    assert s.dlq_topic == "orders-v1.dlq"
    assert s.group_id == "orders-v1"


def test_topic_names_of_the_default_job() -> None:
    s = load_settings()
    assert (s.shuffle_topic, s.control_topic, s.checkpoints_topic, s.dlq_topic) == (
        "wordcount.shuffle",
        "wordcount.control",
        "wordcount.checkpoints",
        "wordcount.dlq",
    )
    assert s.group_id == "wordcount"


def test_topic_names_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_JOB_NAME", "envjob")
    assert load_settings().control_topic == "envjob.control"
    assert load_settings(job_name="flagjob").control_topic == "flagjob.control"


def test_client_config_merges_extra_kafka_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().client_config() == {"bootstrap.servers": "127.0.0.1:9092"}
    monkeypatch.setenv(
        "PROCESSOR_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}'
    )
    s = load_settings(bootstrap_servers="k:9093")
    assert s.client_config() == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }


def test_settings_can_be_built_directly() -> None:
    assert isinstance(load_settings(), Settings)
    assert Settings(shuffle_partitions=3).shuffle_partitions == 3
