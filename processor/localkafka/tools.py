"""Kafka's own command-line tools (the ``kafka-tools`` module) run from jars Maven fetches.

The broker's jars (``broker.LocalBroker``) leave the tools out: ``kafka-dump-log``,
``kafka-transactions`` and ``kafka-metadata-quorum`` live in ``org.apache.kafka:kafka-tools``,
fetched once into a home of their own next to the broker's, so the broker's jar set and its
completion marker stay as they are.

Example::

    out = run_tool("org.apache.kafka.tools.DumpLogSegments", ["--files", segment])
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from processor import maven
from processor.localkafka.brokertools import (
    KAFKA_VERSION,
    TOOLS_SUMS,
    BrokerError,
    default_cache_dir,
    find_java,
    pom_xml,
)

TOOLS_POM = pom_xml(("org.apache.kafka", "kafka-tools"), f"kafka-tools-{KAFKA_VERSION}-runtime")
# Kafka's tools log through log4j2; without a configuration it warns on every run.
_QUIET = "-Dlog4j2.level=WARN"


def tools_libs(cache_dir: Path | None = None) -> Path:
    """The directory of the tools' jars, fetched with Maven on first use."""
    home = (cache_dir or default_cache_dir()) / f"kafka-tools-{KAFKA_VERSION}"
    try:
        return maven.fetch(
            home, TOOLS_POM, f"Kafka {KAFKA_VERSION} tools", "kafka-tools-*.jar", TOOLS_SUMS
        )
    except maven.MavenError as exc:
        raise BrokerError(str(exc)) from exc


def run_tool(main_class: str, args: list[str], timeout: float = 300) -> str:
    """Run one of Kafka's tools to completion and return what it printed on stdout.

    Raises ``BrokerError`` with the tool's last error lines when it exits non-zero."""
    cmd = [find_java(), _QUIET, "-cp", str(tools_libs() / "*"), main_class, *args]
    done = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise BrokerError(f"{main_class.rsplit('.', 1)[-1]} exited {done.returncode}: {tail}")
    return done.stdout
