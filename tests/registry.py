"""A real Confluent-compatible schema registry for the tests: Apicurio Registry, whose
``/apis/ccompat/v7`` API is Confluent's REST API, in memory.

Like the Kafka broker and S3Proxy, it comes from Maven Central through ``mvn``: the
``io.apicurio:apicurio-registry-app`` distribution (classifier ``all``, a tar.gz of the
Quarkus application) into ~/.cache/processor, unpacked once. It needs Java 21 or newer
(JAVA_HOME, or a JDK under /usr/lib/jvm); the Kafka broker's Java 17 is not enough.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from processor import maven
from processor.localkafka.broker import _default_cache_dir
from tests.s3server import _die_with_parent

APICURIO_VERSION = "3.3.3"
# The SHA-256 of the distribution (processor/maven.py; regenerate it as its docstring says).
APICURIO_SUMS = (
    Path(__file__).resolve().parent / "checksums" / f"apicurio-registry-{APICURIO_VERSION}.sha256"
)
HOST = "127.0.0.1"
CCOMPAT = "/apis/ccompat/v7"


class RegistryError(Exception):
    """The registry could not be fetched or started; the message is one line."""


@dataclass
class ApicurioRegistry:
    data_dir: Path
    port: int = field(default_factory=lambda: free_port())
    cache_dir: Path = field(default_factory=_default_cache_dir)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """What ``SchemaRegistryClient`` (and `processor.serde.Avro`) take as the URL."""
        return f"http://{HOST}:{self.port}{CCOMPAT}"

    @property
    def home(self) -> Path:
        return self.cache_dir / f"apicurio-registry-{APICURIO_VERSION}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "apicurio.log"

    def fetch(self) -> Path:
        """The unpacked application (once per cache); returns its directory."""
        try:
            libs = maven.fetch(
                self.home,
                _pom_xml(),
                f"Apicurio Registry {APICURIO_VERSION}",
                "*-all.tar.gz",
                APICURIO_SUMS,
            )
        except maven.MavenError as exc:
            raise RegistryError(str(exc)) from exc
        app = self.home / "app"
        marker = app / ".unpacked"
        # The SHA-256 of the archive it was unpacked from, which maven.fetch checked.
        (archive,) = libs.glob("*-all.tar.gz")
        unpacked = maven.parse_sums(APICURIO_SUMS.read_text(), APICURIO_SUMS)[archive.name]
        if _read(marker) == unpacked:
            return app
        with maven.locked(self.home / ".lock"):
            if _read(marker) == unpacked:
                return app
            shutil.rmtree(app, ignore_errors=True)
            with tarfile.open(archive) as tar:
                tar.extractall(app, filter="data")
            marker.write_text(unpacked + "\n")
        return app

    def start(self, timeout: float = 120) -> None:
        """Start it and return once the ccompat API answers (``timeout`` excludes the fetch)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        java = java_21()
        app = self.fetch()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            java,
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.http.host={HOST}",
            "-Dquarkus.management.enabled=false",  # else it binds 0.0.0.0:9000
            "-Dquarkus.log.level=WARN",
            "-jar",
            str(app / "quarkus-run.jar"),
        ]
        deadline = time.monotonic() + timeout
        with self.log_file.open("ab") as log:
            offset = log.tell()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = maven.tail(self.log_file.read_bytes()[offset:].decode(errors="replace"))
                raise RegistryError(f"Apicurio Registry did not start on {self.url}: {tail}")
            time.sleep(0.25)

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._proc = None

    def running(self) -> bool:
        """Whether the registry's process is still there."""
        return self._proc is not None and self._proc.poll() is None

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=1.0) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def java_21() -> str:
    """A java of version 21 or newer: JAVA_HOME's, the PATH's, or a JDK in /usr/lib/jvm."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    candidates.extend(sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True))
    for java in candidates:
        if java.is_file() and _major(java) >= 21:
            return str(java)
    raise RegistryError(
        "Apicurio Registry needs Java 21 or newer: none in JAVA_HOME, PATH or /usr/lib/jvm"
    )


def _major(java: Path) -> int:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
        found = re.search(r'version "(\d+)', done.stderr + done.stdout)
        if found:
            return int(found.group(1))
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _pom_xml() -> str:
    # The distribution alone: its pom's dependencies are what the tar.gz already holds.
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>local.processor</groupId>\n"
        f"  <artifactId>apicurio-registry-{APICURIO_VERSION}-runtime</artifactId>\n"
        "  <version>1</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n"
        "    <dependency><groupId>io.apicurio</groupId>"
        "<artifactId>apicurio-registry-app</artifactId>"
        f"<version>{APICURIO_VERSION}</version><type>tar.gz</type><classifier>all</classifier>"
        "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>"
        "</exclusions></dependency>\n"
        "  </dependencies>\n"
        "</project>\n"
    )
