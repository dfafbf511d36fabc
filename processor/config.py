"""Settings of every processor command: environment variables ``PROCESSOR_*``, CLI flags on top."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from processor.errors import SettingsError as SettingsError
from processor.storage_location import S3Location as S3Location
from processor.topics import CHECKPOINTS, CONTROL, DLQ, job_topic, shuffle_topic
from processor.worker_hosts import DEFAULT_WORKER_HOSTS, WorkerHosts

# A directory of files named after the variables (PROCESSOR_API_TOKEN, PROCESSOR_KAFKA_CONFIG,
# PROCESSOR_S3_SECRET_ACCESS_KEY...), each holding that setting's value: a Kubernetes Secret
# or a compose secret mounted as files. Unset: no files are read (never a default directory,
# so what a process reads never depends on what happens to exist on the machine). Child
# processes (`processor local`) inherit the variable and read the same files, so no secret
# has to be in their environment.
SECRETS_DIR_ENV = "PROCESSOR_SECRETS_DIR"


class SecretFileError(ValueError):
    """A secrets directory or file that must not be used; the message names it."""


class _SecretFiles(SecretsSettingsSource):
    """pydantic-settings' secrets_dir source, refusing what ssh refuses for a private key:
    a secrets directory that is not there, and a file that other users may read."""

    def __call__(self) -> dict[str, Any]:
        directory = Path(str(self.secrets_dir)).expanduser()
        if not directory.is_dir():
            # pydantic-settings only warns; a token that silently is not there disables
            # the status page's authentication.
            raise SecretFileError(f"{SECRETS_DIR_ENV}={directory} is not a directory")
        return super().__call__()

    @classmethod
    def find_case_path(cls, dir_path: Path, file_name: str, case_sensitive: bool) -> Path | None:
        path = super().find_case_path(dir_path, file_name, case_sensitive)
        if path is not None and path.is_file():
            # Group bits are allowed: Kubernetes adds group read for the pod's fsGroup to a
            # Secret volume's files (defaultMode 0400 shows as 0440 then).
            mode = path.stat().st_mode & 0o777
            if mode & 0o007:
                raise SecretFileError(
                    f"{path} is accessible to other users (mode {mode:04o}): chmod it 0400"
                )
        return path


# The checkpoint storage holds <job>/<task>/... next to savepoints/<name>/.
RESERVED_JOB_NAMES = frozenset({"savepoints"})


def default_state_root() -> Path:
    """Where state and local checkpoints go unless configured: per user,
    ``$XDG_STATE_HOME/processor``, else ``~/.local/state/processor``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "processor"


class Settings(BaseSettings):
    """One job's configuration. Every field maps to ``PROCESSOR_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PROCESSOR_", extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' order, first wins: arguments (CLI flags), the environment,
        then the files of ``PROCESSOR_SECRETS_DIR``. No .env file is read."""
        # Read when settings are made, not at import: tests and children set it later.
        secrets_dir = os.environ.get(SECRETS_DIR_ENV, "")
        if not secrets_dir:
            return (init_settings, env_settings)
        return (init_settings, env_settings, _SecretFiles(settings_cls, secrets_dir=secrets_dir))

    bootstrap_servers: str = "127.0.0.1:9092"
    # No dots: every topic, group and transactional id of the job is "<job>." + something, so
    # a prefixed ACL on "a." would also cover job "a.b" (and ".." made state/../task).
    job_name: str = Field(default="wordcount", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
    # ``path/to/file.py:attribute``: the pipeline to run; empty = the built-in word count on
    # input_topic -> output_topic.
    pipeline: str = ""
    # Start a new job from a savepoint (`processor savepoint`): its name in the checkpoint
    # storage, or its location (a directory or s3://bucket/prefix). Applied only while the job
    # has no committed positions of its own, so a restart never goes back to it.
    # exactly_once: aligned barriers, transactions. at_least_once: no alignment and no
    # transactions; after a failure some records count (and are written) twice.
    guarantee: Literal["exactly_once", "at_least_once"] = "exactly_once"
    # unaligned: a keyed task snapshots at the first barrier and holds no channel back; the
    # records in flight stay in the shuffle log (checkpointing/unaligned.py). Exactly-once
    # still; no savepoints, no fallback to an older snapshot.
    checkpoint_alignment: Literal["aligned", "unaligned"] = "aligned"
    from_savepoint: str = ""
    # Restore even if the savepoint holds state of operators the pipeline no longer has.
    allow_dropped_state: bool = False
    input_topic: str = "words"
    output_topic: str = "word-counts"
    shuffle_partitions: int = Field(default=8, ge=1, le=1024)
    # The shuffle topic is transient: the keyed tasks delete what no snapshot needs any more
    # (every purge interval), so it is created with infinite retention (-1), like Kafka
    # Streams' repartition topics; a finite one could delete records a checkpoint still needs.
    shuffle_retention_ms: int = Field(default=-1, ge=-1)
    # Purged records free disk only once their whole segment is below the log start.
    shuffle_segment_bytes: int = Field(default=52_428_800, ge=1_048_576)
    shuffle_purge_interval_ms: int = Field(default=30_000, ge=0)  # 0: never purge
    checkpoint_interval_ms: int = Field(default=1000, ge=50, le=3_600_000)
    checkpoint_timeout_ms: int = Field(default=60_000, ge=1000)
    # A checkpoint still in progress delays the next trigger until it completes (Flink's
    # default too: processor/checkpointing/schedule.py).
    max_concurrent_checkpoints: int = Field(default=1, ge=1, le=100)
    # Per user by default ($XDG_STATE_HOME/processor or ~/.local/state/processor, see
    # processor/state/dirs.py), not /tmp where another user can make the directory first.
    state_dir: Path = Field(default_factory=lambda: default_state_root() / "state")
    # A directory (local or a shared mount) or s3://bucket/prefix.
    checkpoint_dir: Path | S3Location = Field(
        default_factory=lambda: default_state_root() / "checkpoints"
    )
    # For s3:// checkpoints; empty = what boto3 finds itself (AWS_* variables, ~/.aws, an
    # instance or pod role). The endpoint is for other S3 APIs (MinIO, Ceph...).
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: SecretStr = SecretStr("")
    s3_secret_access_key: SecretStr = SecretStr("")
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
    # A loop task's read-ahead of its feedback (record bytes): past it the rest waits in the
    # log, so a loop that feeds back more than it consumes grows the topic, not the memory.
    feedback_buffer_bytes: int = Field(default=33_554_432, ge=1024)
    # Pre-aggregate each epoch before a shuffle where the aggregation allows it. Off ships every
    # record through the shuffle (one [key, value] pair per record, packed into batches): for
    # measuring what the combiner saves, as Kafka Streams and Flink have none by default.
    combine: bool = True
    # Longer keys are skipped and counted: records must stay well below Kafka's size limit.
    max_key_bytes: int = Field(default=32_768, ge=16, le=524_288)
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    # Copies of every topic the job creates (internal topics, sinks); unset: min(3, the
    # brokers in the cluster's metadata), with min.insync.replicas=2 from 3 copies on
    # (kafka/replication.py). Set it on a cluster that may have a broker down at first start.
    replication_factor: int | None = Field(default=None, ge=1, le=16)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    # Bearer token for the coordinator's status page and /api/status (never for /metrics or
    # /healthz, which probes and Prometheus use); empty: no token.
    api_token: SecretStr = SecretStr("")
    # Queryable state (docs/query-state.md): a worker serves GET /state/... on its metrics
    # port, behind api_token when set; off: those routes do not exist. State is user data.
    state_api: Literal["on", "off"] = "off"
    # How long a state request waits for its task's state (a restore, a commit, a scan).
    state_api_timeout_ms: int = Field(default=2000, ge=10, le=60_000)
    # The address others (the coordinator) reach this worker's metrics port at, for state
    # requests; empty: http://<metrics_host>:<metrics_port>, the host name for 0.0.0.0.
    state_api_url: str = Field(default="", pattern=r"^(https?://\S+)?$")
    # The hosts a worker's announced state URL may name, for the coordinator to forward to
    # (processor/worker_hosts.py): host names, .domain suffixes, IP networks.
    state_api_workers: str = DEFAULT_WORKER_HOSTS
    metrics_host: str = "127.0.0.1"  # 0.0.0.0 in containers, so that Prometheus can scrape
    # Host names (comma-separated) the HTTP side answers pages to when PROCESSOR_API_TOKEN is
    # not set, besides IP addresses, localhost and this machine's name: a name of another
    # site in Host is a web page reading it by DNS rebinding (processor/endpoints.py).
    http_hosts: str = Field(default="", pattern=r"^[A-Za-z0-9.,:\[\] -]*$")
    # /healthz fails once the main loop has not gone round for this long (a stuck loop).
    health_timeout_ms: int = Field(default=60_000, ge=1000)
    # The status page links here (the job's Grafana dashboard); empty: no link.
    grafana_url: str = Field(default="", pattern=r"^(https?://\S+)?$")
    # Extra librdkafka settings for every client (security.protocol, sasl.*, ssl.*),
    # e.g. PROCESSOR_KAFKA_CONFIG='{"security.protocol": "SASL_SSL"}'.
    # Values are secrets (sasl.password, ssl.key.password...): never shown in a repr or a log.
    kafka_config: dict[str, SecretStr] = Field(default_factory=dict)
    # What a record that fails (a user function raises, it does not decode, it cannot be
    # written) does: dlq = it goes to <job>.dlq and the job goes on; stop = the job stops
    # there, nothing of that epoch committed, and stops there again after a restart.
    on_error: Literal["dlq", "stop"] = "dlq"
    # What <job>.dlq keeps of a dead record: full = its bytes (key and value as read, or its
    # value's JSON), the error's text and a user function's traceback; metadata = where it
    # was read and why it failed (operator, reason, the error's type, position, lengths),
    # none of its bytes nor the error's text, which may quote them; off = nothing is written
    # (dead records are still counted, and logged: the first ones in full).
    dlq_mode: Literal["full", "metadata", "off"] = "full"
    # Retention of <job>.dlq and <job>.late (-1: for ever), set on each coordinator start.
    dlq_retention_ms: int = Field(default=604_800_000, ge=-1)
    late_retention_ms: int = Field(default=604_800_000, ge=-1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    @field_validator("job_name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.lower() in RESERVED_JOB_NAMES:
            raise ValueError(
                f"{value!r} is reserved (checkpoint storage keeps savepoints under "
                f"{value.lower()}/): pick another job name"
            )
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name at least one host:port")
        return value

    @field_validator("checkpoint_dir", mode="before")
    @classmethod
    def _checkpoint_location(cls, value: object) -> object:
        if isinstance(value, str) and "://" in value:
            if not value.startswith("s3://"):
                raise ValueError("must be a directory or an s3://bucket/prefix location")
            return S3Location.parse(value)
        return value

    @property
    def http_host_names(self) -> frozenset[str]:
        """`http_hosts`, localhost, this machine's name and `state_api_url`'s, lower-case."""
        given = {name.strip().lower() for name in self.http_hosts.split(",") if name.strip()}
        advertised = urlsplit(self.state_api_url).hostname or "localhost"
        return frozenset({*given, "localhost", socket.gethostname().lower(), advertised})

    @field_validator("state_api_workers")
    @classmethod
    def _worker_hosts(cls, value: str) -> str:
        WorkerHosts.parse(value)  # its ValueError says which entry
        return value

    @field_validator("s3_endpoint_url")
    @classmethod
    def _endpoint_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/@\s]+(/\S*)?$", value):
            raise ValueError("must be an http:// or https:// URL without credentials in it")
        return value

    @field_validator("s3_secret_access_key")
    @classmethod
    def _key_pair(cls, value: SecretStr, info: ValidationInfo) -> SecretStr:
        key_id = info.data.get("s3_access_key_id")
        if bool(value.get_secret_value()) != bool(key_id and key_id.get_secret_value()):
            raise ValueError("set both PROCESSOR_S3_ACCESS_KEY_ID and this, or neither")
        return value

    def client_config(self) -> dict[str, Any]:
        """Settings shared by every Kafka client the service creates."""
        extra = {k: v.get_secret_value() for k, v in self.kafka_config.items()}
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    @property
    def shuffle_topic(self) -> str:
        return shuffle_topic(self.job_name, "shuffle")

    @property
    def control_topic(self) -> str:
        return job_topic(self.job_name, CONTROL)

    @property
    def checkpoints_topic(self) -> str:
        return job_topic(self.job_name, CHECKPOINTS)

    @property
    def dlq_topic(self) -> str:
        return job_topic(self.job_name, DLQ)

    @property
    def group_id(self) -> str:
        return self.job_name


def load_settings(**overrides: Any) -> Settings:
    """The non-None overrides (CLI flags) first, then the environment, then the files of
    ``PROCESSOR_SECRETS_DIR`` (see ``Settings.settings_customise_sources``)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        source = "--" + name.replace("_", "-") if name in given else "PROCESSOR_" + name.upper()
        raise SettingsError(f"invalid setting {source}: {err['msg']}") from None
    except SecretFileError as exc:
        raise SettingsError(f"invalid secrets: {exc}") from None
    except SourceError as exc:
        if isinstance(exc.__cause__, SecretFileError):
            raise SettingsError(f"invalid secrets: {exc.__cause__}") from None
        # A complex value (PROCESSOR_KAFKA_CONFIG) that is not even JSON: only the environment
        # and secrets files are parsed this way, overrides arrive as Python values.
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1) if match else "?"
        detail = f"not valid JSON ({exc.__cause__})" if exc.__cause__ else str(exc)
        if _SecretFiles.__name__ in str(exc):
            detail += f" in the file of that name in {SECRETS_DIR_ENV}"
        raise SettingsError(f"invalid setting PROCESSOR_{name.upper()}: {detail}") from None
