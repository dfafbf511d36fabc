"""Security settings reach every client (and the user's producer settings win over the
engine's batching); secrets never show in a repr, a dump or an error."""

from __future__ import annotations

import json

import pytest

from processor.config import SettingsError, load_settings
from processor.kafka import clients

SECURITY = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "svc-processor",
    "sasl.password": "hunter2-secret",
    "ssl.ca.location": "/etc/ssl/ca.pem",
}


def test_every_client_kind_gets_the_security_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps(SECURITY))
    s = load_settings()
    for config in (
        clients.common_config(s),
        clients.consumer_config(s),
        clients.producer_config(s, **{"transactional.id": "job.count-0"}),
    ):
        for key, value in SECURITY.items():
            assert config[key] == value


def test_secrets_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps(SECURITY))
    s = load_settings()
    for text in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        assert "hunter2-secret" not in text


def test_an_invalid_setting_does_not_echo_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps({"sasl.password": 12345}))
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "12345" not in str(err.value)
    assert "PROCESSOR_KAFKA_CONFIG" in str(err.value)


def test_the_users_producer_settings_override_the_engines_batching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PROCESSOR_KAFKA_CONFIG's codec and linger win over the engine's defaults (they did
    not: a user's compression.type was silently lz4); what a caller passes wins over both."""
    mine = {"compression.type": "zstd", "linger.ms": "20", "queue.buffering.max.messages": "1"}
    monkeypatch.setenv("PROCESSOR_KAFKA_CONFIG", json.dumps(mine))
    s = load_settings()
    assert {k: clients.producer_config(s)[k] for k in mine} == mine
    control = clients.producer_config(s, **{"linger.ms": 0, "compression.type": "none"})
    assert (control["linger.ms"], control["compression.type"]) == (0, "none")
    assert clients.producer_config(s)["batch.size"] == 1_000_000  # the engine's, not given
