"""A real S3 API server for the tests: S3Proxy (org.gaul:s3proxy) on its filesystem backend.

Like the Kafka broker, its jars come from Maven Central through ``mvn`` (a generated pom and
dependency:copy-dependencies) into ~/.cache/processor, shared by every checkout; a fresh
machine needs only Java 17+ and Maven. Objects live under ``data_dir``, so a stopped and
restarted server (an outage) still has them.
"""

from __future__ import annotations

import ctypes
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from processor import maven
from processor.localkafka.broker import _default_cache_dir, _java, _port_free_soon

S3PROXY_VERSION = "2.7.0"
# The SHA-256 of each jar (processor/maven.py; regenerate it as its docstring says).
S3PROXY_SUMS = Path(__file__).resolve().parent / "checksums" / f"s3proxy-{S3PROXY_VERSION}.sha256"
HOST = "127.0.0.1"

# S3Proxy ships no logging configuration: logback's default is every DEBUG line of Jetty.
_LOGBACK_XML = """\
<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
  <logger name="org.gaul.s3proxy.Main" level="INFO"/>
</configuration>
"""


class S3ServerError(Exception):
    """The server could not be fetched or started; the message is one line."""


@dataclass
class S3Server:
    port: int
    data_dir: Path
    cache_dir: Path = field(default_factory=_default_cache_dir)
    # New for every server: a test can look for them in logs and errors and never find them.
    access_key_id: str = field(default_factory=lambda: "key-" + secrets.token_hex(8))
    secret_access_key: str = field(
        default_factory=lambda: "secret-" + secrets.token_hex(16), repr=False
    )
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def home(self) -> Path:
        return self.cache_dir / f"s3proxy-{S3PROXY_VERSION}"

    @property
    def libs_dir(self) -> Path:
        return self.home / "libs"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "s3proxy.log"

    def fetch(self) -> Path:
        """S3Proxy and its dependencies into ``libs_dir`` (once per cache); returns it."""
        try:
            return maven.fetch(
                self.home,
                _pom_xml(),
                f"S3Proxy {S3PROXY_VERSION}",
                f"s3proxy-{S3PROXY_VERSION}.jar",
                S3PROXY_SUMS,
            )
        except maven.MavenError as exc:
            raise S3ServerError(str(exc)) from exc

    def start(self, timeout: float = 60) -> None:
        """Start the server and return once it answers HTTP (``timeout`` excludes the fetch)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        libs = self.fetch()
        if not _port_free_soon(self.port):
            raise S3ServerError(f"{HOST}:{self.port} is in use; pick another S3 test port")
        objects = self.data_dir / "objects"
        objects.mkdir(parents=True, exist_ok=True)
        logback = self.data_dir / "logback.xml"
        logback.write_text(_LOGBACK_XML)
        properties = self.data_dir / "s3proxy.properties"
        properties.write_text(
            "\n".join(
                [
                    f"s3proxy.endpoint={self.endpoint_url}",
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={self.access_key_id}",
                    f"s3proxy.credential={self.secret_access_key}",
                    "jclouds.provider=filesystem-nio2",
                    # Required by the provider, unused by it.
                    "jclouds.identity=local",
                    "jclouds.credential=local",
                    f"jclouds.filesystem.basedir={objects}",
                    "",
                ]
            )
        )
        properties.chmod(0o600)
        cmd = [
            _java(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            # The tests send a few thousand requests: start-up time matters, peak speed not.
            "-XX:TieredStopAtLevel=1",
            f"-Dlogback.configurationFile={logback}",
            "-cp",
            str(libs / "*"),
            "org.gaul.s3proxy.Main",
            "--properties",
            str(properties),
        ]
        deadline = time.monotonic() + timeout
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} starting S3Proxy\n".encode())
            log.flush()
            offset = log.tell()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Ctrl-C of the test run must not take it down before the fixture's stop(),
                # but a test run that dies must not leave it holding the port.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = maven.tail(self.log_file.read_bytes()[offset:].decode(errors="replace"))
                raise S3ServerError(f"S3Proxy did not start on {self.endpoint_url}: {tail}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (``sig``, then SIGKILL after 10 s); a no-op when not running."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._proc = None

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url, timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True  # 403 for an anonymous request: it is up
        except OSError:
            return False


def _pom_xml() -> str:
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>local.processor</groupId>\n"
        f"  <artifactId>s3proxy-{S3PROXY_VERSION}-runtime</artifactId>\n"
        "  <version>1</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n"
        "    <dependency><groupId>org.gaul</groupId><artifactId>s3proxy</artifactId>"
        f"<version>{S3PROXY_VERSION}</version></dependency>\n"
        "  </dependencies>\n"
        "</project>\n"
    )


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it exits."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
