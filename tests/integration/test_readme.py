"""README's "Your own pipeline, in one screen", run as written: its pipeline file and its
commands, in a fresh directory, against the tests' broker (for `processor kafka start`
and the install line, which the test session has done its own way). The sink must hold
what the README says it holds."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.integration.harness import wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Your own pipeline, in one screen"
_OURS = {"orders", "orders-per-user"}  # its topics, and its job's (<job>.<suffix>)


def first_screen() -> tuple[str, str, list[str]]:
    """The section's pipeline file (name, text) and its commands after it, in order."""
    text = README.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    (python,) = [body for lang, body in blocks if lang == "python"]
    name = python.splitlines()[0].removeprefix("# ").strip()
    after = [body for lang, body in blocks[blocks.index(("python", python)) + 1 :]]
    commands = [line.split("  #")[0].strip() for body in after for line in body.splitlines()]
    return name, python, [c for c in commands if c]


def forget_the_job(bootstrap: str) -> None:
    """The README's topics and job gone from the broker, so that the screen runs as on a
    fresh one (a test session may reuse a broker)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=30).topics if t.split(".")[0] in _OURS]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):
                future.result()
    groups = [g.group_id for g in admin.list_consumer_groups().result(30).valid]
    ours = [g for g in groups if g.split(".")[0] in _OURS]
    if ours:
        for future in admin.delete_consumer_groups(ours, request_timeout=30).values():
            with contextlib.suppress(KafkaException):
                future.result()
    wait_until(
        lambda: not set(names) & set(admin.list_topics(timeout=30).topics), 60, "topics deleted"
    )


def test_the_first_screen_runs_as_written(kafka_bootstrap: str, tmp_path: Path) -> None:
    name, source, commands = first_screen()
    forget_the_job(kafka_bootstrap)
    assert name == "mine.py" and commands[-1].startswith("processor tail")
    (tmp_path / name).write_text(source)
    env = {**os.environ, "PROCESSOR_BOOTSTRAP_SERVERS": kafka_bootstrap}
    env.pop("PROCESSOR_JOB_NAME", None)
    # `processor` as the installed script would run it: this interpreter's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    output = ""
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        output = done.stdout
    assert sorted(output.split("\n")[:-1]) == ["ann\t2", "bob\t1"], output
