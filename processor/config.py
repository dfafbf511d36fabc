"""Settings of every processor command: environment variables ``PROCESSOR_*``, CLI flags on top."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError


class Settings(BaseSettings):
    """One job's configuration. Every field maps to ``PROCESSOR_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PROCESSOR_", extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    job_name: str = Field(default="wordcount", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    job: str = "wordcount"
    input_topic: str = "words"
    output_topic: str = "word-counts"
    shuffle_partitions: int = Field(default=8, ge=1, le=1024)
    checkpoint_interval_ms: int = Field(default=1000, ge=50, le=3_600_000)
    checkpoint_timeout_ms: int = Field(default=60_000, ge=1000)
    state_dir: Path = Path("/tmp/processor/state")
    checkpoint_dir: Path = Path("/tmp/processor/checkpoints")
    retained_checkpoints: int = Field(default=2, ge=1, le=100)
    # Failed snapshots in a row that a task declines and survives; past it the task fails
    # and recovers from its last commit (Flink's tolerable-failed-checkpoints, default 0).
    tolerable_checkpoint_failures: int = Field(default=0, ge=0)
    worker_id: str = ""
    # Workers the coordinator waits for (10 s at most) before its first assignment.
    expected_workers: int = Field(default=0, ge=0)
    heartbeat_interval_ms: int = Field(default=300, ge=10)
    worker_timeout_ms: int = Field(default=3000, ge=100)
    # Batching on the hot path: records per consume call, and how many distinct keys an
    # epoch may buffer (combiner, dirty state) before it is flushed into the open transaction.
    consume_batch: int = Field(default=5000, ge=1)
    flush_keys: int = Field(default=200_000, ge=1)
    # Longer keys are skipped and counted: records must stay well below Kafka's size limit.
    max_key_bytes: int = Field(default=32_768, ge=16, le=524_288)
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"  # 0.0.0.0 in containers, so that Prometheus can scrape
    # /healthz fails once the main loop has not gone round for this long (a stuck loop).
    health_timeout_ms: int = Field(default=60_000, ge=1000)
    # Extra librdkafka settings for every client (security.protocol, sasl.*, ssl.*),
    # e.g. PROCESSOR_KAFKA_CONFIG='{"security.protocol": "SASL_SSL"}'.
    # Values are secrets (sasl.password, ssl.key.password...): never shown in a repr or a log.
    kafka_config: dict[str, SecretStr] = Field(default_factory=dict)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    @field_validator("bootstrap_servers")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name at least one host:port")
        return value

    def client_config(self) -> dict[str, Any]:
        """Settings shared by every Kafka client the service creates."""
        extra = {k: v.get_secret_value() for k, v in self.kafka_config.items()}
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    @property
    def shuffle_topic(self) -> str:
        return f"{self.job_name}.shuffle"

    @property
    def control_topic(self) -> str:
        return f"{self.job_name}.control"

    @property
    def checkpoints_topic(self) -> str:
        return f"{self.job_name}.checkpoints"

    @property
    def dlq_topic(self) -> str:
        return f"{self.job_name}.dlq"

    @property
    def group_id(self) -> str:
        return self.job_name


class SettingsError(Exception):
    """An invalid setting, described in one line that names it."""


def load_settings(**overrides: Any) -> Settings:
    """Environment first, then the non-None overrides (CLI flags)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        source = "--" + name.replace("_", "-") if name in given else "PROCESSOR_" + name.upper()
        raise SettingsError(f"invalid setting {source}: {err['msg']}") from None
    except SourceError as exc:
        # A complex value (PROCESSOR_KAFKA_CONFIG) that is not even JSON: only the environment
        # is parsed this way, overrides arrive as Python values.
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1) if match else "?"
        detail = f"not valid JSON ({exc.__cause__})" if exc.__cause__ else str(exc)
        raise SettingsError(f"invalid setting PROCESSOR_{name.upper()}: {detail}") from None
