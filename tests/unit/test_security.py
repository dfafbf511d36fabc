"""Security settings reach every client; secrets never show in a repr, a dump or an error."""

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
