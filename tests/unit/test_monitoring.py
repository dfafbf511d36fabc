"""Static checks of the monitoring and Kubernetes artifacts.

deploy/prometheus (scrape config, alert rules), deploy/grafana (provisioning, the dashboard),
their services in docker-compose.yml, and deploy/k8s. No Prometheus, Grafana, Docker or
cluster is needed: the files are parsed and checked against each other and against the code
they deploy (the metrics processor/metrics.py exports, the settings, the CLI, the Dockerfile's
user). When ``promtool`` is on PATH (Debian: ``apt-get install prometheus``) it checks the
config and the rules, runs unit tests of every alert on synthetic series and evaluates every
dashboard query; when ``kubectl`` is, ``kubectl kustomize`` builds deploy/k8s. Both are
skipped otherwise.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from prometheus_client import REGISTRY

from processor.cli import build_parser
from processor.config import SECRETS_DIR_ENV, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "rules" / "processor.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "processor.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "processor.yml"
K8S = DEPLOY / "k8s"

METRICS_PORT = 9400
SCRAPE_JOBS = {"processor-coordinator", "processor-worker"}
SEVERITIES = {"info", "warning", "critical"}

# The metrics every view of the job needs (the brief of the dashboard).
DASHBOARD_METRICS = {
    "processor_records_in_total",
    "processor_event_time_lag_seconds",
    "processor_watermark_seconds",
    "processor_late_records_total",
    "processor_records_out_total",
    "processor_consumer_lag_records",
    "processor_last_checkpoint_duration_seconds",
    "processor_checkpoint_duration_seconds_bucket",
    "processor_last_checkpoint_size_bytes",
    "processor_last_checkpoint_full_size_bytes",
    "processor_checkpoint_alignment_seconds_bucket",
    "processor_checkpoints_failed_total",
    "processor_snapshot_failures_total",
    "processor_restores_total",
    "processor_last_restore_duration_seconds",
    "processor_workers_alive",
    "processor_records_skipped_total",
}
ALERTS = {
    "ProcessorCheckpointsFailing",
    "ProcessorCheckpointsStalled",
    "ProcessorCheckpointsSlow",
    "ProcessorSnapshotsFailing",
    "ProcessorConsumerLagGrowing",
    "ProcessorTargetDown",
    "ProcessorNoWorkersAlive",
    "ProcessorWorkerLost",
    "ProcessorTaskRestored",
    "ProcessorTaskStoppedForGood",
    "ProcessorShufflePurgesFailing",
}


# ------------------------------------------------------------------------------ helpers


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _load_all_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


def _exported_names() -> set[str]:
    """The series names /metrics shows once every labelled child exists."""
    importlib.import_module("processor.metrics")  # registers the metrics
    names = {"up"}  # Prometheus adds it to every target
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return _exported_names()


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NUMBER = re.compile(r"(?<![\w:])\d[\d.]*(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*")
_IDENTIFIER = re.compile(r"[A-Za-z_:][\w:]*")
_PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (Grafana variables allowed)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subqueries ($__rate_interval too)
    text = _LABEL_LIST.sub(" ", text)  # by (job, le), on (instance), ...
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # any other Grafana variable
    text = _NUMBER.sub(" ", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() not in _PROMQL_WORDS:
            names.add(match.group())
    return names


_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?")


def _selectors(expr: str) -> Iterator[tuple[str, str]]:
    """(metric name, label matchers) of each selector of a processor_ metric."""
    text = _LABEL_LIST.sub(" ", expr)
    for match in _SELECTOR.finditer(text):
        if match.group(1).startswith("processor_"):
            yield match.group(1), match.group(2) or ""


def test_promql_metric_names_reads_names_only() -> None:
    expr = (
        'sum by (job, le) (rate(a_bucket{job="x", le=~"1|b"}[$__rate_interval])) > bool 0.9'
        " and on (instance) (time() - b offset 5m < 600) or histogram_quantile(0.5, c[1m:])"
        " unless max(d) by (task) > 1e3"
    )
    assert promql_metric_names(expr) == {"a_bucket", "b", "c", "d"}


# ------------------------------------------------------------------------ PromQL sources


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def _dashboard_exprs(dashboard: Mapping[str, Any]) -> list[str]:
    return [
        target["expr"]
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    document = _load_yaml(RULES)
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def all_exprs(dashboard: dict[str, Any], rules: list[dict[str, Any]]) -> list[str]:
    return _dashboard_exprs(dashboard) + [str(rule["expr"]) for rule in rules]


def test_every_metric_queried_is_exported(all_exprs: list[str], exported: set[str]) -> None:
    assert all_exprs
    for expr in all_exprs:
        names = promql_metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        unknown = names - exported
        assert not unknown, f"not exported by processor/metrics.py: {sorted(unknown)} in {expr}"


def test_rates_are_taken_of_counters_only(all_exprs: list[str]) -> None:
    for expr in all_exprs:
        for match in re.finditer(r"\b(?:rate|irate|increase|resets)\(\s*([A-Za-z_:][\w:]*)", expr):
            assert match.group(1).endswith(("_total", "_bucket", "_count", "_sum")), expr


def test_histogram_quantiles_keep_the_le_label(all_exprs: list[str]) -> None:
    for expr in all_exprs:
        if "histogram_quantile" in expr:
            assert re.search(r"\bby\s*\([^)]*\ble\b[^)]*\)", expr), expr
            assert "_bucket" in expr, expr


def test_fixed_job_matchers_name_a_scrape_job(all_exprs: list[str]) -> None:
    """`up` and process_* carry the scrape job's name, not the processor job's."""
    for expr in all_exprs:
        for op, value in re.findall(r'\bjob\s*(=~|=)\s*"([^"]*)"', expr):
            if "$" in value:
                continue
            pattern = value if op == "=~" else re.escape(value)
            assert any(re.fullmatch(pattern, job) for job in SCRAPE_JOBS), expr


# ---------------------------------------------------------------------------- dashboard


def test_dashboard_identity_and_job_variable(dashboard: dict[str, Any], exported: set[str]) -> None:
    assert dashboard["uid"] == "processor"
    assert dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    job = variables["job"]
    assert job["type"] == "query"
    query = job["query"]["query"] if isinstance(job["query"], dict) else job["query"]
    match = re.fullmatch(r"label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)", query)
    assert match, query
    assert match.group(1) in exported
    assert match.group(2) == "job_name"


def test_dashboard_panels(dashboard: dict[str, Any]) -> None:
    panels = list(_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for item in [panel, *panel["targets"]]:
            assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_dashboard_shows_what_operators_need(dashboard: dict[str, Any]) -> None:
    used = set().union(*(promql_metric_names(e) for e in _dashboard_exprs(dashboard)))
    missing = DASHBOARD_METRICS - used
    assert not missing, f"the dashboard does not show {sorted(missing)}"


def test_dashboard_queries_select_the_job(dashboard: dict[str, Any]) -> None:
    for expr in _dashboard_exprs(dashboard):
        for name, matchers in _selectors(expr):
            assert re.search(r'\bjob_name\s*=~?\s*"\$job"', matchers), (
                f"{name} without $job: {expr}"
            )


# -------------------------------------------------------------------- Prometheus config


@pytest.fixture(scope="module")
def prometheus_config() -> dict[str, Any]:
    document = _load_yaml(PROMETHEUS_CONFIG)
    assert isinstance(document, dict)
    return document


def test_prometheus_loads_the_rules(prometheus_config: dict[str, Any]) -> None:
    found = {
        path.resolve()
        for pattern in prometheus_config["rule_files"]
        for path in PROMETHEUS_CONFIG.parent.glob(pattern)
    }
    assert RULES.resolve() in found


def test_prometheus_scrapes_coordinator_and_every_worker(
    prometheus_config: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    jobs = {job["job_name"]: job for job in prometheus_config["scrape_configs"]}
    assert set(jobs) == SCRAPE_JOBS
    for job in jobs.values():
        # The metrics name the processor job `job_name`: nothing they export collides
        # with a label Prometheus sets, so no honor_labels (an operator may override it).
        assert "honor_labels" not in job, job["job_name"]

    coordinator = jobs["processor-coordinator"]
    targets = [t for group in coordinator["static_configs"] for t in group["targets"]]
    assert targets == [f"coordinator:{METRICS_PORT}"]

    worker = jobs["processor-worker"]
    (dns,) = worker["dns_sd_configs"]
    assert dns["names"] == ["worker"] and dns["type"] == "A" and dns["port"] == METRICS_PORT
    relabel = {r.get("target_label"): r for r in worker["relabel_configs"]}
    # `worker` is the worker id each worker exports itself, never
    # the target's address.
    assert "worker" not in relabel

    # The targets are compose services that expose the port the processor serves on.
    for name in ("coordinator", "worker"):
        assert str(METRICS_PORT) in {str(p) for p in services[name].get("expose", [])}
        env = services[name]["environment"]
        assert str(env["PROCESSOR_METRICS_PORT"]) == str(METRICS_PORT)


def test_alert_rules_are_complete(rules: list[dict[str, Any]]) -> None:
    names = [rule.get("alert") for rule in rules]
    assert None not in names, "recording rules belong elsewhere"
    assert len(names) == len(set(names)), "alert names must be unique"
    assert set(names) == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


# ------------------------------------------------------------------------------ Grafana


def test_grafana_datasource_is_the_prometheus_service(
    services: dict[str, dict[str, Any]],
) -> None:
    document = _load_yaml(DATASOURCES)
    assert document["apiVersion"] == 1
    (source,) = document["datasources"]
    assert source["type"] == "prometheus"
    match = re.fullmatch(r"http://([\w.-]+):(\d+)/?", source["url"])
    assert match, source["url"]
    assert match.group(1) in services, f"no compose service {match.group(1)}"
    assert match.group(2) == "9090"


def test_grafana_dashboard_provider_reads_the_mounted_dashboards(
    services: dict[str, dict[str, Any]],
) -> None:
    document = _load_yaml(DASHBOARD_PROVIDERS)
    assert document["apiVersion"] == 1
    (provider,) = document["providers"]
    assert provider["type"] == "file"
    mounts = _bind_mounts(services["grafana"])
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent


# ------------------------------------------------------------------------- compose wiring


_COMPOSE_VARIABLE = re.compile(r"\$(?:(\$)|\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def _interpolate(value: Any) -> Any:
    """Compose's interpolation with no variable set: ``${X:-d}`` is d, ``$$`` is ``$``."""
    if isinstance(value, str):
        return _COMPOSE_VARIABLE.sub(lambda m: "$" if m.group(1) else m.group(3) or "", value)
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = _interpolate(_load_yaml(COMPOSE))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def _bind_mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (short syntax)."""
    found: dict[str, Path] = {}
    for mount in service.get("volumes", []):
        source, target = mount.split(":")[:2]
        if source.startswith((".", "/")):
            found[target] = (COMPOSE.parent / source).resolve()
    return found


def _named_volumes(service: Mapping[str, Any]) -> set[str]:
    sources = {mount.split(":")[0] for mount in service.get("volumes", [])}
    return {source for source in sources if not source.startswith((".", "/"))}


def _depends_on(service: Mapping[str, Any]) -> set[str]:
    return set(service.get("depends_on") or [])


def test_compose_prometheus(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    prometheus = services["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus:")
    assert "coordinator" in _depends_on(prometheus)
    assert "127.0.0.1:9090:9090" in prometheus["ports"]
    assert prometheus["restart"] == "unless-stopped"
    flags = dict(arg.split("=", 1) for arg in prometheus["command"])
    config = Path(flags["--config.file"])
    mounts = _bind_mounts(prometheus)
    assert mounts[str(config.parent)] == PROMETHEUS_CONFIG.parent
    assert config.name == PROMETHEUS_CONFIG.name
    assert _named_volumes(prometheus) <= set(compose["volumes"])


def test_compose_grafana(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana:")
    assert {"coordinator", "prometheus"} <= _depends_on(grafana)
    assert "127.0.0.1:3000:3000" in grafana["ports"]
    env = {k: str(v) for k, v in grafana["environment"].items()}
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    mounts = _bind_mounts(grafana)
    provisioning = Path("/etc/grafana/provisioning")
    assert mounts[str(provisioning / "datasources")] == DATASOURCES.parent
    assert mounts[str(provisioning / "dashboards")] == DASHBOARD_PROVIDERS.parent
    home = Path(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert mounts[str(home.parent)] / home.name == DASHBOARD
    for host_path in mounts.values():
        assert host_path.is_dir(), host_path
    assert _named_volumes(grafana) <= set(compose["volumes"])


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    document = _load_yaml(K8S / "kustomization.yaml")
    assert document["kind"] == "Kustomization"
    return dict(document)


@pytest.fixture(scope="module")
def manifests(kustomization: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {name: _load_all_yaml(K8S / name) for name in kustomization["resources"]}


def _one(manifests: Mapping[str, list[dict[str, Any]]], kind: str) -> dict[str, Any]:
    found = [doc for docs in manifests.values() for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def _service(manifests: Mapping[str, list[dict[str, Any]]], component: str) -> dict[str, Any]:
    (found,) = [
        doc
        for doc in manifests["coordinator.yaml"] + manifests["worker.yaml"]
        if doc["kind"] == "Service"
        and doc["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


@pytest.fixture(scope="module")
def config_map(manifests: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return _one(manifests, "ConfigMap")


@pytest.fixture(scope="module")
def workloads(manifests: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {
        "coordinator": _one(manifests, "Deployment"),
        "worker": _one(manifests, "StatefulSet"),
    }


def _container(workload: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_kustomization_lists_every_manifest(kustomization: dict[str, Any]) -> None:
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


def test_manifest_kinds(manifests: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {name: [(d["apiVersion"], d["kind"]) for d in docs] for name, docs in manifests.items()}
    assert kinds == {
        "configmap.yaml": [("v1", "ConfigMap")],
        "checkpoints-pvc.yaml": [("v1", "PersistentVolumeClaim")],
        "coordinator.yaml": [("apps/v1", "Deployment"), ("v1", "Service")],
        "worker.yaml": [("apps/v1", "StatefulSet"), ("v1", "Service")],
        "worker-pdb.yaml": [("policy/v1", "PodDisruptionBudget")],
        "input-topic-job.yaml": [("batch/v1", "Job")],
        "networkpolicy.yaml": [("networking.k8s.io/v1", "NetworkPolicy")],
    }
    for docs in manifests.values():
        for doc in docs:
            assert "namespace" not in doc["metadata"], "the namespace is the user's choice"


def test_only_prometheus_and_the_deployment_reach_port_9400(
    manifests: dict[str, list[dict[str, Any]]],
) -> None:
    (policy,) = manifests["networkpolicy.yaml"]
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "processor"}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9400}]
    sources = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    assert sources == [
        {"app.kubernetes.io/name": "processor"},
        {"app.kubernetes.io/name": "prometheus"},
    ]


def test_k8s_settings_are_real(
    config_map: dict[str, Any], workloads: dict[str, dict[str, Any]]
) -> None:
    keys = set(config_map["data"])
    for workload in workloads.values():
        keys |= {e["name"] for e in _container(workload).get("env", [])}
    unknown = {
        key
        for key in keys
        if key.startswith("PROCESSOR_")
        and key[len("PROCESSOR_") :].lower() not in Settings.model_fields
        and key != SECRETS_DIR_ENV  # where settings come from, not one of them
    }
    assert not unknown, f"no such setting in processor/config.py: {sorted(unknown)}"
    for key, value in config_map["data"].items():
        assert isinstance(value, str), f"{key}: ConfigMap values must be strings"
    fields = {k: v for k, v in config_map["data"].items() if k != SECRETS_DIR_ENV}
    assert Settings(**{k[len("PROCESSOR_") :].lower(): v for k, v in fields.items()})


# The settings whose values are secrets: never in the ConfigMap or the environment.
SECRET_SETTINGS = {
    f"PROCESSOR_{name.upper()}"
    for name in ("api_token", "kafka_config", "s3_access_key_id", "s3_secret_access_key")
}


# The workers log in to Kafka as a principal of their own, with less than the coordinator's
# (processor/kafka/acls.py): their Secret holds that login.
SECRETS = {
    "Deployment": "processor-secrets",
    "Job": "processor-secrets",
    "StatefulSet": "processor-worker-secrets",
}


def test_k8s_secrets_are_files_not_environment(
    manifests: dict[str, list[dict[str, Any]]], config_map: dict[str, Any]
) -> None:
    secrets_dir = config_map["data"][SECRETS_DIR_ENV]
    assert not SECRET_SETTINGS & set(config_map["data"])
    uid, gid = _dockerfile_user()
    pods = {kind: _one(manifests, kind) for kind in ("Deployment", "StatefulSet", "Job")}
    for kind, workload in pods.items():
        pod = workload["spec"]["template"]["spec"]
        container = _container(workload)
        # The environment is inherited by every child process and readable in /proc.
        assert all("secretRef" not in e for e in container.get("envFrom", [])), kind
        for env in container.get("env", []):
            assert "secretKeyRef" not in env.get("valueFrom", {}), (kind, env["name"])
            assert env["name"] not in SECRET_SETTINGS, (kind, env["name"])
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        mount = mounts[secrets_dir]
        assert mount.get("readOnly") is True, kind
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == SECRETS[kind], kind
        assert volume["secret"]["defaultMode"] == 0o400, kind
        assert all(item.get("mode", 0o400) == 0o400 for item in volume["secret"].get("items", []))
        # Files of a Secret volume belong to root: the image's user reads them through the
        # fsGroup, which Kubernetes gives them (group read added: 0440).
        assert pod["securityContext"]["runAsUser"] == uid, kind
        assert pod["securityContext"]["fsGroup"] == gid, kind


def test_k8s_workloads_read_the_config(
    config_map: dict[str, Any], workloads: dict[str, dict[str, Any]]
) -> None:
    parser = build_parser()
    for command, workload in workloads.items():
        container = _container(workload)
        refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
        assert refs == [config_map["metadata"]["name"]], command
        assert container["args"] == [command]
        parser.parse_args(container["args"])
        assert container["image"].split(":")[0] == "processor"


def test_k8s_coordinator_is_a_singleton(workloads: dict[str, dict[str, Any]]) -> None:
    spec = workloads["coordinator"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate", "an update must not run two coordinators"


def test_k8s_worker_id_is_the_pod_name(workloads: dict[str, dict[str, Any]]) -> None:
    env = {e["name"]: e for e in _container(workloads["worker"])["env"]}
    assert env["PROCESSOR_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_k8s_volumes(
    manifests: dict[str, list[dict[str, Any]]],
    config_map: dict[str, Any],
    workloads: dict[str, dict[str, Any]],
) -> None:
    state_dir = config_map["data"]["PROCESSOR_STATE_DIR"]
    checkpoint_dir = config_map["data"]["PROCESSOR_CHECKPOINT_DIR"]
    pvc = _one(manifests, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "every pod mounts the checkpoints"
    for command, workload in workloads.items():
        pod = workload["spec"]["template"]["spec"]
        mounts = {m["mountPath"]: m["name"] for m in _container(workload)["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        claim = volumes[mounts[checkpoint_dir]]["persistentVolumeClaim"]["claimName"]
        assert claim == pvc["metadata"]["name"], command
    worker = workloads["worker"]
    mounts = {m["mountPath"]: m["name"] for m in _container(worker)["volumeMounts"]}
    templates = {t["metadata"]["name"]: t for t in worker["spec"]["volumeClaimTemplates"]}
    state = templates[mounts[state_dir]]
    assert state["spec"]["accessModes"] == ["ReadWriteOnce"], "state is never shared"


def _dockerfile_user() -> tuple[int, int]:
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE.read_text(encoding="utf-8"), re.MULTILINE)
    assert users, "the Dockerfile sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and gid.isdigit(), "a numeric USER, for runAsNonRoot"
    return int(uid), int(gid)


def _compose_grace_seconds(services: Mapping[str, Any]) -> int:
    grace = str(services["worker"]["stop_grace_period"])
    match = re.fullmatch(r"(\d+)s", grace)
    assert match, grace
    return int(match.group(1))


def test_k8s_pods_run_as_the_image_user(
    workloads: dict[str, dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    uid, gid = _dockerfile_user()
    for command, workload in workloads.items():
        pod = workload["spec"]["template"]["spec"]
        context = {**pod["securityContext"], **_container(workload).get("securityContext", {})}
        assert context["runAsNonRoot"] is True, command
        assert context["runAsUser"] == uid, command
        assert context["runAsGroup"] == gid, command
        assert context["allowPrivilegeEscalation"] is False, command
        assert pod["terminationGracePeriodSeconds"] == 30
        assert pod["terminationGracePeriodSeconds"] == _compose_grace_seconds(services)


def test_k8s_probes_and_metrics_port(
    config_map: dict[str, Any], workloads: dict[str, dict[str, Any]]
) -> None:
    port = int(config_map["data"]["PROCESSOR_METRICS_PORT"])
    assert port == METRICS_PORT
    assert config_map["data"]["PROCESSOR_METRICS_HOST"] == "0.0.0.0", "the kubelet must reach it"
    for command, workload in workloads.items():
        container = _container(workload)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == port, command
        for probe in ("readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            # /healthz reflects the main loop; /metrics answers even when it is stuck.
            assert get["path"] == "/healthz", (command, probe)
            assert ports.get(get["port"], get["port"]) == port, (command, probe)


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_k8s_services(
    manifests: dict[str, list[dict[str, Any]]], workloads: dict[str, dict[str, Any]]
) -> None:
    for component, workload in workloads.items():
        service = _service(manifests, component)
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items(), component
        assert _selects(workload["spec"]["selector"], pod_labels), component
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert ports["metrics"]["port"] == METRICS_PORT, component
        assert ports["metrics"]["targetPort"] in ("metrics", METRICS_PORT), component
    worker_service = _service(manifests, "worker")
    assert worker_service["spec"]["clusterIP"] == "None", "headless: one target per worker"
    assert workloads["worker"]["spec"]["serviceName"] == worker_service["metadata"]["name"]
    # ServiceMonitor's `job` is the Service's name: the same as prometheus.yml's scrape jobs,
    # which the rules' `up{job=~"processor-.*"}` relies on.
    names = {_service(manifests, c)["metadata"]["name"] for c in workloads}
    assert names == SCRAPE_JOBS


def test_k8s_service_monitor_is_an_optional_overlay(
    manifests: dict[str, list[dict[str, Any]]], workloads: dict[str, dict[str, Any]]
) -> None:
    # The base applies on clusters without the operator's CRDs; the overlay adds the monitor.
    assert not any(d["kind"] == "ServiceMonitor" for docs in manifests.values() for d in docs)
    overlay = _load_yaml(K8S / "monitoring" / "kustomization.yaml")
    assert overlay["resources"] == ["..", "servicemonitor.yaml"]
    (monitor,) = _load_all_yaml(K8S / "monitoring" / "servicemonitor.yaml")
    assert monitor["kind"] == "ServiceMonitor"
    # kube-prometheus-stack's Prometheus selects monitors by the Helm release's label.
    assert monitor["metadata"]["labels"]["release"]
    for component in workloads:
        labels = _service(manifests, component)["metadata"]["labels"]
        assert _selects(monitor["spec"]["selector"], labels), component
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert "honorLabels" not in endpoint
    # `worker` comes from the worker itself (its id), not from the pod.
    assert all(r.get("targetLabel") != "worker" for r in endpoint.get("relabelings", []))


def test_k8s_checkpoint_claim_names_a_storage_class(
    manifests: dict[str, list[dict[str, Any]]],
) -> None:
    # Without one, a ReadWriteMany claim waits for the default class, which on most clusters
    # cannot provide ReadWriteMany: Pending for good.
    assert _one(manifests, "PersistentVolumeClaim")["spec"]["storageClassName"]


def test_k8s_worker_disruption_budget(
    manifests: dict[str, list[dict[str, Any]]], workloads: dict[str, dict[str, Any]]
) -> None:
    pdb = _one(manifests, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    worker_labels = workloads["worker"]["spec"]["template"]["metadata"]["labels"]
    coordinator_labels = workloads["coordinator"]["spec"]["template"]["metadata"]["labels"]
    assert _selects(pdb["spec"]["selector"], worker_labels)
    assert not _selects(pdb["spec"]["selector"], coordinator_labels)


def test_k8s_job_creates_the_input_topic(
    manifests: dict[str, list[dict[str, Any]]], config_map: dict[str, Any]
) -> None:
    job = _one(manifests, "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "produce"
    assert args.topic == "$(PROCESSOR_INPUT_TOPIC)"  # expanded by the kubelet from the config
    assert "PROCESSOR_INPUT_TOPIC" in config_map["data"]
    assert [str(f) for f in args.files] == ["/dev/null"], "creates the topic, adds no record"
    refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert refs == [config_map["metadata"]["name"]]
    assert container["image"].split(":")[0] == "processor"


def test_kubectl_kustomize_builds() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(done.stdout) if doc)
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "Job",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "StatefulSet",
        ]
    )


# ------------------------------------------------------------------------------ promtool


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def _run_promtool(promtool: str, *args: str | Path) -> None:
    done = subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_check_config(promtool: str) -> None:
    _run_promtool(promtool, "check", "config", PROMETHEUS_CONFIG)


def test_promtool_check_rules(promtool: str) -> None:
    _run_promtool(promtool, "check", "rules", RULES)


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    matchers = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def _expect(alert: str, at: str, *labels: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [{"exp_labels": dict(item)} for item in labels],
    }


def _alert_tests() -> list[dict[str, Any]]:
    """promtool unit tests: each alert fires when it should, and only then (1m samples)."""
    coordinator = {"instance": "coordinator:9400"}
    started = "process_start_time_seconds"
    warning, critical, info = ({"severity": s} for s in ("warning", "critical", "info"))

    failures, in_a_row = "processor_snapshot_failures_total", "processor_snapshot_failures_in_a_row"
    count_0 = {"job_name": "wc", "task": "count-0"}
    purges = "processor_shuffle_purges_total"

    def lag(values: str, **labels: str) -> dict[str, str]:
        return _series("processor_consumer_lag_records", values, partition="0", **labels)

    return [
        {
            "input_series": [
                # An old coordinator (started at 0) whose counter increases at 21m.
                _series(
                    "processor_checkpoints_failed_total",
                    "0x20 1 2x20",
                    job_name="old",
                    **coordinator,
                ),
                _series(started, "0x45", job="processor-coordinator", **coordinator),
                # A coordinator started at 5m that failed at once: the counter is born at 1.
                _series(
                    "processor_checkpoints_failed_total",
                    "_x5 1x40",
                    job_name="new",
                    instance="c2:9400",
                ),
                _series(started, "300x45", job="processor-coordinator", instance="c2:9400"),
                # A coordinator that never failed, its counter exported at 0.
                _series(
                    "processor_checkpoints_failed_total",
                    "0x45",
                    job_name="ok",
                    instance="c3:9400",
                ),
                _series(started, "0x45", job="processor-coordinator", instance="c3:9400"),
            ],
            "alert_rule_test": [
                _expect("ProcessorCheckpointsFailing", "4m"),
                _expect("ProcessorCheckpointsFailing", "10m", {**warning, "job_name": "new"}),
                _expect("ProcessorCheckpointsFailing", "23m", {**warning, "job_name": "old"}),
                _expect("ProcessorCheckpointsFailing", "40m"),
            ],
        },
        {
            "input_series": [
                # Completes a checkpoint every minute until 10m, none after.
                _series(
                    "processor_last_completed_checkpoint_id",
                    "1+1x10 11x20",
                    job_name="wc",
                    **coordinator,
                ),
                _series("processor_checkpoints_in_progress", "1x30", job_name="wc", **coordinator),
                # Checkpoints pending since the start, none ever completed.
                _series(
                    "processor_checkpoints_in_progress",
                    "1x30",
                    job_name="stuck",
                    instance="c2:9400",
                ),
                # Idle: nothing pending, nothing completed.
                _series(
                    "processor_checkpoints_in_progress",
                    "0x30",
                    job_name="idle",
                    instance="c3:9400",
                ),
            ],
            "alert_rule_test": [
                _expect("ProcessorCheckpointsStalled", "1m"),
                _expect("ProcessorCheckpointsStalled", "5m", {**critical, "job_name": "stuck"}),
                _expect("ProcessorCheckpointsStalled", "13m", {**critical, "job_name": "stuck"}),
                _expect(
                    "ProcessorCheckpointsStalled",
                    "16m",
                    {**critical, "job_name": "stuck"},
                    {**critical, "job_name": "wc"},
                ),
            ],
        },
        {
            "input_series": [
                # Six checkpoints a minute, all between 10 and 30 s ...
                *(
                    _series(
                        "processor_checkpoint_duration_seconds_bucket",
                        v,
                        job_name="slow",
                        le=le,
                    )
                    for le, v in (
                        ("1", "0x30"),
                        ("10", "0x30"),
                        ("30", "0+6x30"),
                        ("+Inf", "0+6x30"),
                    )
                ),
                # ... and all under a second.
                *(
                    _series(
                        "processor_checkpoint_duration_seconds_bucket",
                        v,
                        job_name="fast",
                        le=le,
                    )
                    for le, v in (
                        ("1", "0+6x30"),
                        ("10", "0+6x30"),
                        ("30", "0+6x30"),
                        ("+Inf", "0+6x30"),
                    )
                ),
            ],
            "alert_rule_test": [
                _expect("ProcessorCheckpointsSlow", "8m"),
                _expect("ProcessorCheckpointsSlow", "15m", {**warning, "job_name": "slow"}),
            ],
        },
        {
            "input_series": [
                # count-0 fails two snapshots at 6m and 7m, then succeeds again.
                _series(failures, "0x5 1 2x30", job_name="wc", task="count-0", instance="w1:9400"),
                _series(
                    in_a_row, "0x5 1 2 0x30", job_name="wc", task="count-0", instance="w1:9400"
                ),
                # count-1 has never failed one.
                _series(failures, "0x40", job_name="wc", task="count-1", instance="w1:9400"),
                _series(in_a_row, "0x40", job_name="wc", task="count-1", instance="w1:9400"),
            ],
            "alert_rule_test": [
                _expect("ProcessorSnapshotsFailing", "5m"),
                _expect("ProcessorSnapshotsFailing", "6m", {**warning, **count_0}),
                _expect("ProcessorSnapshotsFailing", "10m", {**warning, **count_0}),
                _expect("ProcessorSnapshotsFailing", "20m"),
            ],
        },
        {
            "input_series": [
                lag("0+100x40", job_name="behind", task="split-0", instance="w1:9400"),
                lag("50x40", job_name="behind", task="count-0", instance="w2:9400"),
                lag("123456x40", job_name="steady", task="split-0", instance="w1:9400"),
                lag("0.3x40", job_name="steady", task="split-1", instance="w1:9400"),
                lag("5000-100x40", job_name="catching-up", task="split-0", instance="w3:9400"),
            ],
            "alert_rule_test": [
                _expect("ProcessorConsumerLagGrowing", "10m"),
                _expect("ProcessorConsumerLagGrowing", "25m", {**warning, "job_name": "behind"}),
            ],
        },
        {
            "input_series": [
                _series(
                    "up",
                    "1 1 0x10",
                    job="processor-worker",
                    instance="10.0.0.5:9400",
                    worker="10.0.0.5:9400",
                ),
                _series("up", "1x12", job="processor-coordinator", **coordinator),
                _series("up", "0x12", job="kafka", instance="kafka:9092"),
            ],
            "alert_rule_test": [
                _expect("ProcessorTargetDown", "2m"),
                _expect(
                    "ProcessorTargetDown",
                    "5m",
                    {
                        **warning,
                        "job": "processor-worker",
                        "instance": "10.0.0.5:9400",
                        "worker": "10.0.0.5:9400",
                    },
                ),
            ],
        },
        {
            "input_series": [
                # Three workers, one lost at 11m, all at 21m.
                _series("processor_workers_alive", "3x10 2x10 0x10", job_name="wc", **coordinator),
                # Scaled up from two to three.
                _series(
                    "processor_workers_alive",
                    "2x10 3x20",
                    job_name="grown",
                    instance="c2:9400",
                ),
            ],
            "alert_rule_test": [
                _expect("ProcessorWorkerLost", "5m"),
                _expect("ProcessorNoWorkersAlive", "5m"),
                _expect("ProcessorWorkerLost", "12m"),
                _expect("ProcessorWorkerLost", "15m", {**warning, "job_name": "wc"}),
                _expect("ProcessorNoWorkersAlive", "15m"),
                _expect("ProcessorNoWorkersAlive", "25m", {**critical, "job_name": "wc"}),
            ],
        },
        {
            "input_series": [
                # A worker started at 3m restored count-1 at once: the counter is born at 1.
                _series(
                    "processor_restores_total",
                    "_x3 1x40",
                    job_name="wc",
                    task="count-1",
                    instance="w1:9400",
                ),
                _series(started, "180x45", job="processor-worker", instance="w1:9400"),
                # A worker started at 0 restored count-2 at once, and again at 20m.
                _series(
                    "processor_restores_total",
                    "1x19 2x20",
                    job_name="wc",
                    task="count-2",
                    instance="w2:9400",
                ),
                _series(started, "0x45", job="processor-worker", instance="w2:9400"),
            ],
            "alert_rule_test": [
                _expect(
                    "ProcessorTaskRestored",
                    "5m",
                    {**info, "job_name": "wc", "task": "count-1"},
                    {**info, "job_name": "wc", "task": "count-2"},
                ),
                _expect("ProcessorTaskRestored", "16m"),
                _expect(
                    "ProcessorTaskRestored",
                    "25m",
                    {**info, "job_name": "wc", "task": "count-2"},
                ),
                _expect("ProcessorTaskRestored", "35m"),
            ],
        },
        {
            "input_series": [
                # count-3's shuffle records were deleted at 4m: stopped for good.
                _series(
                    "processor_task_failed_permanently_total",
                    "_x3 1x10",
                    job_name="wc",
                    task="count-3",
                    reason="records_deleted",
                    instance="w1:9400",
                ),
            ],
            "alert_rule_test": [
                _expect("ProcessorTaskStoppedForGood", "2m"),
                _expect(
                    "ProcessorTaskStoppedForGood",
                    "5m",
                    {
                        **critical,
                        "job_name": "wc",
                        "task": "count-3",
                        "reason": "records_deleted",
                    },
                ),
            ],
        },
        {
            "input_series": [
                # Job "denied": every purge fails from 2m on (two a minute), none succeeds.
                _series(
                    purges,
                    "_x2 1+2x60",
                    job_name="denied",
                    outcome="failed",
                    instance="w1:9400",
                ),
                # Job "flaky": a purge fails now and then, others succeed.
                _series(
                    purges, "0x10 1x50", job_name="flaky", outcome="failed", instance="w1:9400"
                ),
                _series(purges, "0+2x60", job_name="flaky", outcome="ok", instance="w1:9400"),
                # Job "recovered": purges failed until 20m, then succeed.
                _series(
                    purges,
                    "1+2x19 39x40",
                    job_name="recovered",
                    outcome="failed",
                    instance="w2",
                ),
                _series(purges, "_x20 1+2x40", job_name="recovered", outcome="ok", instance="w2"),
            ],
            "alert_rule_test": [
                _expect("ProcessorShufflePurgesFailing", "5m"),
                _expect(
                    "ProcessorShufflePurgesFailing",
                    "15m",
                    {**warning, "job_name": "denied"},
                    {**warning, "job_name": "recovered"},
                ),
                _expect("ProcessorShufflePurgesFailing", "30m", {**warning, "job_name": "denied"}),
            ],
        },
    ]


def test_promtool_alert_unit_tests(
    promtool: str, tmp_path: Path, dashboard: dict[str, Any]
) -> None:
    tests = _alert_tests()
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert tested == ALERTS
    # Every dashboard query evaluates (a syntax or type error fails the test).
    grafana = {"$job": "wc", "$__rate_interval": "1m"}
    exprs = []
    for expr in _dashboard_exprs(dashboard):
        for variable, value in grafana.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        exprs.append({"expr": expr, "eval_time": "1m", "exp_samples": []})
    tests.append({"input_series": [_series("up", "1x2", job="x")], "promql_expr_test": exprs})
    for test in tests:
        test["interval"] = "1m"

    # promtool compares annotations too; these tests are about expressions, `for` and labels
    # (`promtool check rules` checks the annotation templates).
    document = _load_yaml(RULES)
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(document), encoding="utf-8")
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(unit), encoding="utf-8")
    _run_promtool(promtool, "test", "rules", tmp_path / "tests.yml")
