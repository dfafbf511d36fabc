"""Apache Flink 2.2.1 as a standalone session cluster: a JobManager JVM and TaskManager JVMs,
separate processes, all run from the word count's shaded jar (bench/flink/), which holds
flink-runtime's entrypoints (``StandaloneSessionClusterEntrypoint``, ``TaskManagerRunner``),
so no Flink distribution is needed.

The word count (bench/flink/src/main/java/bench/WordCount.java) is submitted to it detached
through the REST endpoint (``-Dbench.flink.remote=host:port``: a remote environment); it then
belongs to the cluster, which restarts it from its latest completed checkpoint by itself when a
TaskManager dies. bench/recovery_lag.py kills one TaskManager and starts a replacement at once,
as a supervisor (systemd, a Kubernetes StatefulSet) would.

Standalone clusters:
https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/resource-providers/standalone/overview/
Configuration keys:
https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/config/
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.peers.base import spawn
from bench.peers.flink_peer import JAR

JOBMANAGER_MAIN = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TASKMANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
# The JVMs' flags and the derived memory settings come from Flink's own calculation, as its
# start scripts get them (bin/config.sh runs BashJavaUtils GET_JM_RESOURCE_PARAMS /
# GET_TM_RESOURCE_PARAMS): from the memory sizes below, -Xmx/-Xms, -XX:MaxDirectMemorySize
# and every memory component as dynamic properties.
# https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/memory/mem_setup_tm/
BASH_JAVA_UTILS = "org.apache.flink.runtime.util.bash.BashJavaUtils"
RESULT_PREFIX = "BASH_JAVA_UTILS_EXEC_RESULT:"

# What differs from Flink's defaults, and why.
RECOVERY_CONFIG: dict[str, str] = {
    # Failure detection. A SIGKILLed TaskManager's RPC endpoint refuses connections at once; the
    # JobManager marks a heartbeat target unreachable after heartbeat.rpc-failure-threshold
    # (2, the default) consecutive failed heartbeat RPCs, i.e. after about 2 heartbeat
    # intervals: 1 s here instead of the default 10 s. heartbeat.timeout only matters for a
    # target that stops answering without refusing (a hung or partitioned JVM): 5 s instead
    # of 50 s, still far above this machine's GC pauses (512 MB heaps).
    # https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/config/#advanced-fault-tolerance-options
    # https://nightlies.apache.org/flink/flink-docs-release-1.14/release-notes/flink-1.14/#timeout-heartbeat-if-the-heartbeat-target-is-no-longer-reachable
    "heartbeat.interval": "1000",
    "heartbeat.timeout": "5000",
    "heartbeat.rpc-failure-threshold": "2",
    # Restart: the default with checkpointing on is exponential-delay from 1 s; a fixed, short
    # delay and unlimited attempts instead. The delay only spaces the attempts (a first attempt
    # may still see the dead TaskManager's slot and fail at once, FLINK-23202); the restarted
    # job waits for slots anyway until the replacement TaskManager has registered.
    # https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/ops/state/task_failure_recovery/#fixed-delay-restart-strategy
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "2147483647",
    "restart-strategy.fixed-delay.delay": "500 ms",
    # Region failover (the default): the keyBy connects every task to every other, so the
    # whole job is one pipelined region and restarts as a whole from the latest checkpoint.
    # https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/ops/state/task_failure_recovery/#restart-pipelined-region-failover-strategy
    "jobmanager.execution.failover-strategy": "region",
}


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all bound at once, so no two are the same)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def yaml_scalar(value: str) -> str:
    """A config.yaml value (Flink 2 reads standard YAML): quoted, so numbers stay strings that
    Flink parses by the option's type."""
    return json.dumps(value)


class FlinkSessionCluster:
    """One JobManager and ``taskmanagers`` TaskManagers of one slot each, under ``workdir``.

    TaskManager ``i`` has the stable resource id ``tm-<i>`` (``taskmanager.resource-id``), as a
    StatefulSet's pods keep their names: should the replacement register before the heartbeat
    verdict on the dead one, the JobMaster sees the same TaskManager back with a new session
    and closes the old connection at once. In practice the verdict comes first: a dead
    TaskManager's peers lose their data connections at once (the job fails over within
    ~0.1 s) and the JobManager marks it unreachable ~1 s after the kill, while a new JVM
    takes seconds to start."""

    def __init__(self, workdir: Path, taskmanagers: int = 2) -> None:
        self.workdir = workdir
        self.taskmanagers = taskmanagers
        self.conf_dir = workdir / "flink-conf"
        self.rpc_port, self.rest_port = free_ports(2)
        self.java = shutil.which("java") or "java"
        self._params: dict[str, tuple[list[str], list[str]]] = {}

    def config(self) -> dict[str, str]:
        return {
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": str(self.rpc_port),
            "jobmanager.bind-host": "127.0.0.1",
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": str(self.rest_port),
            "taskmanager.host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.numberOfTaskSlots": "1",
            # JobManager: dispatcher, resource manager, job master; no state of the job.
            "jobmanager.memory.process.size": "768m",
            # A TaskManager with one slot: heap = framework heap (128 MB, the default) + task
            # heap; RocksDB in managed memory (native): 128 MB per TaskManager, the 256 MB the
            # MiniCluster run gave its two slots, one slot each here.
            "taskmanager.memory.task.heap.size": "384m",
            "taskmanager.memory.managed.size": "128m",
            "taskmanager.memory.network.min": "64m",
            "taskmanager.memory.network.max": "64m",
            "io.tmp.dirs": str(self.workdir / "flink" / "tmp"),
            # Observation only: the REST API answers from a cache of the job's execution graph
            # that lives web.refresh-interval (3 s by default); the bench polls the subtasks'
            # states to time the job's own recovery, so a 200 ms cache.
            # https://nightlies.apache.org/flink/flink-docs-release-2.2/docs/deployment/config/#web-refresh-interval
            "web.refresh-interval": "200",
            **RECOVERY_CONFIG,
        }

    def write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "flink" / "tmp").mkdir(parents=True, exist_ok=True)
        lines = [f"{k}: {yaml_scalar(v)}" for k, v in self.config().items()]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")
        # WARN and up, plus the lines that tell a failover's story: TaskManagers lost and
        # registered, the job's state changes, checkpoints completed and restored.
        loggers = [
            "org.apache.flink.runtime.jobmaster.JobMaster",
            "org.apache.flink.runtime.executiongraph.ExecutionGraph",
            "org.apache.flink.runtime.executiongraph.DefaultExecutionGraph",
            "org.apache.flink.runtime.resourcemanager",
            "org.apache.flink.runtime.checkpoint.CheckpointCoordinator",
            "org.apache.flink.runtime.taskexecutor.TaskExecutor",
        ]
        extra = "\n".join(f'    <Logger name="{n}" level="INFO"/>' for n in loggers)
        (self.conf_dir / "log4j2.xml").write_text(
            '<?xml version="1.0" encoding="UTF-8"?>\n<Configuration status="WARN">\n'
            '  <Appenders><Console name="err" target="SYSTEM_ERR">'
            '<PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>\n'
            "  <Loggers>\n"
            '    <Logger name="org.apache.flink.metrics.MetricGroup" level="ERROR"/>\n'
            f"{extra}\n"
            '    <Root level="WARN"><AppenderRef ref="err"/></Root>\n  </Loggers>\n'
            "</Configuration>\n"
        )

    def resource_params(self, which: str) -> tuple[list[str], list[str]]:
        """``which`` JM or TM: (JVM flags, ``-D key=value`` dynamic properties) from Flink's
        BashJavaUtils, as bin/jobmanager.sh and bin/taskmanager.sh get them."""
        if which not in self._params:
            done = subprocess.run(
                [
                    self.java,
                    "-cp",
                    str(JAR),
                    BASH_JAVA_UTILS,
                    f"GET_{which}_RESOURCE_PARAMS",
                    "--configDir",
                    str(self.conf_dir),
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            results = [
                line[len(RESULT_PREFIX) :].split()
                for line in done.stdout.splitlines()
                if line.startswith(RESULT_PREFIX)
            ]
            if done.returncode != 0 or len(results) != 2:
                tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
                raise RuntimeError(f"Flink's memory calculation failed: {' | '.join(tail)}")
            self._params[which] = (results[0], results[1])
        return self._params[which]

    def _jvm(self, which: str, main: str) -> list[str]:
        jvm, dynamic = self.resource_params(which)
        return [
            self.java,
            *jvm,
            f"-Dlog4j.configurationFile={self.conf_dir / 'log4j2.xml'}",
            "-cp",
            str(JAR),
            main,
            "--configDir",
            str(self.conf_dir),
            *dynamic,
        ]

    def jobmanager_cmd(self) -> list[str]:
        return self._jvm("JM", JOBMANAGER_MAIN)

    def taskmanager_cmd(self, index: int) -> list[str]:
        return [*self._jvm("TM", TASKMANAGER_MAIN), "-D", f"taskmanager.resource-id=tm-{index}"]

    def start_jobmanager(self) -> subprocess.Popen[bytes]:
        return spawn(self.jobmanager_cmd(), self.workdir / "jobmanager.log")

    def start_taskmanager(self, index: int) -> subprocess.Popen[bytes]:
        return spawn(self.taskmanager_cmd(index), self.workdir / f"taskmanager-{index}.log")

    def rest(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())

    def registered_taskmanagers(self) -> int:
        try:
            tms = self.rest("/taskmanagers").get("taskmanagers", [])
        except (urllib.error.URLError, OSError, ValueError):
            return 0
        return len(tms) if isinstance(tms, list) else 0

    def wait_taskmanagers(
        self, count: int, procs: list[subprocess.Popen[bytes]], timeout: float = 120
    ) -> None:
        """Until ``count`` TaskManagers are registered; fails at once if one of ``procs``
        (the cluster's JVMs) exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.registered_taskmanagers() >= count:
                return
            dead = [p.args for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Flink: a cluster JVM exited (logs in {self.workdir})")
            time.sleep(0.3)
        raise TimeoutError(f"Flink: {count} TaskManagers not registered within {timeout:.0f}s")

    def submit(
        self, args: list[str], log: Path, timeout: float = 180, main_class: str = "bench.WordCount"
    ) -> str:
        """Submit the word count (its usual arguments), or another program of the jar that
        prints ``JOB_ID <id>`` under ``bench.flink.remote``, detached; returns the job id."""
        cmd = [
            self.java,
            "-Xmx256m",
            f"-Dbench.flink.remote=127.0.0.1:{self.rest_port}",
            f"-Dlog4j.configurationFile={self.conf_dir / 'log4j2.xml'}",
            "-cp",
            str(JAR),
            main_class,
            *args,
        ]
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
        log.write_text(done.stdout + done.stderr)
        for line in done.stdout.splitlines():
            if line.startswith("JOB_ID "):
                return line.split()[1]
        raise RuntimeError(f"submitting the Flink job failed (exit {done.returncode}): see {log}")

    def job_state(self, job_id: str) -> str:
        try:
            return str(self.rest(f"/jobs/{job_id}").get("state"))
        except (urllib.error.URLError, OSError, ValueError):
            return "UNKNOWN"

    def tasks_running(self, job_id: str) -> bool | None:
        """Whether every task of the job runs (None: the REST call failed)."""
        try:
            vertices = self.rest(f"/jobs/{job_id}").get("vertices", [])
        except (urllib.error.URLError, OSError, ValueError):
            return None
        # Per vertex, its subtasks counted by state ("tasks"): all of them RUNNING.
        return bool(vertices) and all(
            v.get("tasks", {}).get("RUNNING") == v.get("parallelism") for v in vertices
        )

    def restarts(self, job_id: str) -> int | None:
        """How many times the job was restarted (the job's numRestarts metric)."""
        try:
            body = self.rest(f"/jobs/{job_id}/metrics?get=numRestarts")
        except (urllib.error.URLError, OSError, ValueError):
            return None
        if isinstance(body, list) and body:
            return int(body[0].get("value", 0))
        return None

    def wait_final(self, job_id: str, timeout: float) -> str:
        """The job's state once it is FINISHED, FAILED or CANCELED; ``TIMEOUT (<state>)``
        if it is none of them after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in ("FINISHED", "FAILED", "CANCELED"):
                return state
            time.sleep(0.5)
        return f"TIMEOUT ({state})"

    def start_all(self) -> list[subprocess.Popen[bytes]]:
        """Writes the configuration, starts the JobManager and every TaskManager and waits
        until they are registered; the processes (stopped again if that fails)."""
        self.write_config()
        procs = [self.start_jobmanager()]
        procs += [self.start_taskmanager(i) for i in range(self.taskmanagers)]
        try:
            self.wait_taskmanagers(self.taskmanagers, procs)
        except Exception:
            stop_all(procs)
            raise
        return procs


def stop_all(procs: list[subprocess.Popen[bytes]], timeout: float = 30) -> None:
    """SIGTERM to the cluster's JVMs (a clean shutdown), SIGKILL after ``timeout``."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
