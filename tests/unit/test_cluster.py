"""The local cluster's pure parts: port layout, node properties, the replication of the
topics a job creates."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from processor.config import Settings, SettingsError, load_settings
from processor.kafka.replication import default_factor, min_insync, topic_config, topic_replication
from processor.localkafka.broker import LocalBroker
from processor.localkafka.brokertools import BrokerError
from processor.localkafka.cluster import LocalCluster, cluster_properties, port_layout


def _properties(broker: LocalBroker) -> dict[str, str]:
    lines = broker._server_properties().splitlines()
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


# ----------------------------------------------------------------- ports


def test_one_broker_keeps_the_single_broker_layout() -> None:
    layout = port_layout(9092, 1)
    assert layout.brokers == (9092,)
    assert layout.controllers == (9093,)


def test_three_brokers_take_consecutive_ports_and_controllers_a_block_above() -> None:
    layout = port_layout(39092, 3)
    assert layout.brokers == (39092, 39093, 39094)
    assert layout.controllers == (39192, 39193, 39194)


@pytest.mark.parametrize("nodes", range(1, 10))
@pytest.mark.parametrize("port", [9092, 9093, 9190])
def test_no_port_is_used_twice(port: int, nodes: int) -> None:
    layout = port_layout(port, nodes)
    ports = layout.brokers + layout.controllers
    assert len(set(ports)) == 2 * nodes


@pytest.mark.parametrize("nodes", [0, 10])
def test_the_node_count_is_bounded(nodes: int) -> None:
    with pytest.raises(BrokerError, match="1 to 9 brokers"):
        port_layout(9092, nodes)


def test_ports_past_65535_are_refused() -> None:
    with pytest.raises(BrokerError, match="no room"):
        port_layout(65435, 3)


# ----------------------------------------------------------------- properties


def test_a_single_broker_is_configured_as_before(tmp_path: Path) -> None:
    props = _properties(LocalCluster(1, 9092, tmp_path).broker(1))
    assert props["node.id"] == "1"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert "controller.quorum.voters" not in props
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["log.dirs"] == str(tmp_path.resolve() / "data")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"


def test_cluster_nodes_share_a_static_quorum_and_replicate_internal_topics(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(3, 39092, tmp_path)
    nodes = [_properties(broker) for broker in cluster.brokers("some-id")]
    voters = "1@127.0.0.1:39192,2@127.0.0.1:39193,3@127.0.0.1:39194"
    for i, props in enumerate(nodes, start=1):
        assert props["node.id"] == str(i)
        assert props["controller.quorum.voters"] == voters
        assert "controller.quorum.bootstrap.servers" not in props
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{39091 + i},CONTROLLER://127.0.0.1:{39191 + i}"
        )
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{39091 + i}"
        assert props["log.dirs"] == str(tmp_path.resolve() / f"node-{i}" / "data")
        assert props["offsets.topic.replication.factor"] == "3"
        assert props["transaction.state.log.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        # No broker-wide minimum: a 1-copy topic of some test stays writable.
        assert "min.insync.replicas" not in props
    assert cluster.bootstrap == "127.0.0.1:39092,127.0.0.1:39093,127.0.0.1:39094"


def test_a_two_node_cluster_does_not_ask_for_three_copies() -> None:
    props = cluster_properties(2)
    assert props["transaction.state.log.replication.factor"] == "2"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["offsets.topic.replication.factor"] == "2"


def test_stop_and_status_find_the_cluster_a_data_dir_holds(tmp_path: Path) -> None:
    assert LocalCluster.found(tmp_path).nodes == 1
    cluster = LocalCluster(3, 39092, tmp_path)
    cluster._cluster_id()  # what the first start writes
    assert LocalCluster.found(tmp_path, 39092).nodes == 3
    assert [node.pid for node in LocalCluster.found(tmp_path, 39092).status()] == [None] * 3
    with pytest.raises(BrokerError, match="holds a cluster of 3 brokers"):
        LocalCluster(5, 39092, tmp_path)._cluster_id()


def test_a_data_dir_keeps_one_layout(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("cluster.id=x\n")  # a single broker's
    with pytest.raises(BrokerError, match="holds a single broker's data"):
        LocalCluster(3, 39092, tmp_path).start()
    LocalCluster(1, 39092, tmp_path).check_layout()
    other = tmp_path / "other"
    other.mkdir()
    LocalCluster(3, 39092, other)._cluster_id()
    with pytest.raises(BrokerError, match="holds a cluster of 3 brokers; start it with"):
        LocalCluster(1, 39092, other).start()
    LocalCluster(3, 39092, other).check_layout()


def test_the_cluster_id_is_kept_across_starts(tmp_path: Path) -> None:
    first = LocalCluster(3, 39092, tmp_path)._cluster_id()
    assert LocalCluster(3, 39092, tmp_path)._cluster_id() == first


# ----------------------------------------------------------------- replication


@pytest.mark.parametrize(
    ("brokers", "configured", "factor"),
    [(1, None, 1), (2, None, 2), (3, None, 3), (6, None, 3), (0, None, 1), (6, 5, 5), (3, 1, 1)],
)
def test_the_replication_factor_defaults_to_at_most_three(
    brokers: int, configured: int | None, factor: int
) -> None:
    assert default_factor(brokers, configured) == factor


def test_three_copies_need_two_in_sync() -> None:
    assert [min_insync(f) for f in (1, 2, 3, 5)] == [1, 1, 2, 2]
    assert topic_config(3, broker_min_insync=1) == {"min.insync.replicas": "2"}
    # The brokers' own minimum already suffices: the topic does not repeat it.
    assert topic_config(3, broker_min_insync=2) == {}
    assert topic_config(1, broker_min_insync=1) == {}


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().replication_factor is None
    monkeypatch.setenv("PROCESSOR_REPLICATION_FACTOR", "3")
    assert load_settings().replication_factor == 3
    monkeypatch.setenv("PROCESSOR_REPLICATION_FACTOR", "0")
    with pytest.raises(SettingsError, match="PROCESSOR_REPLICATION_FACTOR"):
        load_settings()


class _Admin:
    """The two answers ``topic_replication`` asks a cluster for: its brokers, and one
    broker's ``min.insync.replicas``."""

    def __init__(self, brokers: int, broker_min_insync: str) -> None:
        self.brokers = {i: object() for i in range(1, brokers + 1)}
        self.value = broker_min_insync
        self.described: list[str] = []

    def list_topics(self, **_: Any) -> SimpleNamespace:
        return SimpleNamespace(brokers=self.brokers, topics={})

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[dict[str, Any]]]:
        (resource,) = resources
        self.described.append(resource.name)
        done: Future[dict[str, Any]] = Future()
        done.set_result({"min.insync.replicas": SimpleNamespace(value=self.value)})
        return {resource: done}


@pytest.mark.parametrize(
    ("brokers", "configured", "broker_min", "factor", "config"),
    [
        (1, None, "1", 1, {}),
        (3, None, "1", 3, {"min.insync.replicas": "2"}),
        (3, None, "2", 3, {}),
        (4, 2, "1", 2, {}),
        # Fewer brokers listed than asked for: no error before a topic must be created.
        (2, 3, "1", 3, {"min.insync.replicas": "2"}),
    ],
)
def test_topic_replication_asks_the_cluster(
    brokers: int, configured: int | None, broker_min: str, factor: int, config: dict[str, str]
) -> None:
    admin = _Admin(brokers, broker_min)
    settings = Settings(replication_factor=configured)
    replication = topic_replication(settings, admin)  # type: ignore[arg-type]
    assert (replication.factor, dict(replication.config)) == (factor, config)
    assert admin.described == (["1"] if factor >= 3 else [])
