"""The ``processor`` command."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from processor.api.streams import PipelineError
from processor.commands import acls as acls_command
from processor.commands import nexmark as nexmark_command
from processor.commands import postgres as postgres_command
from processor.config import Settings, SettingsError, load_settings
from processor.logs import configure_logging

# Flags that override settings, shared by every command that talks to Kafka.
_SETTING_FLAGS: list[tuple[str, type, str]] = [
    ("bootstrap_servers", str, "Kafka bootstrap servers (PROCESSOR_BOOTSTRAP_SERVERS)"),
    ("job_name", str, "job name: prefix of its internal topics (PROCESSOR_JOB_NAME)"),
    ("input_topic", str, "input topic (PROCESSOR_INPUT_TOPIC)"),
    ("output_topic", str, "output topic (PROCESSOR_OUTPUT_TOPIC)"),
    (
        "pipeline",
        str,
        "the pipeline to run, path/to/file.py[:attribute] (PROCESSOR_PIPELINE); "
        "default: the built-in word count of the input topic into the output topic",
    ),
    ("shuffle_partitions", int, "partitions of <job>.shuffle (PROCESSOR_SHUFFLE_PARTITIONS)"),
    ("checkpoint_interval_ms", int, "checkpoint interval (PROCESSOR_CHECKPOINT_INTERVAL_MS)"),
    ("state_dir", Path, "local RocksDB state (PROCESSOR_STATE_DIR)"),
    (
        "checkpoint_dir",
        str,
        "checkpoint storage: directory or s3://bucket/prefix (PROCESSOR_CHECKPOINT_DIR)",
    ),
    ("metrics_port", int, "serve /metrics on this port, 0 = off (PROCESSOR_METRICS_PORT)"),
    (
        "from_savepoint",
        str,
        "start a new job from this savepoint: a name, a directory or s3://... "
        "(PROCESSOR_FROM_SAVEPOINT)",
    ),
]


_EXIT_CODES = """exit codes:
  0    done (or stopped by SIGTERM / SIGINT, a service)
  1    failed: a task failed for good, a check found a difference, a service died
  2    refused at start, with one line: a setting, the pipeline, an ACL, a savepoint
  3    coordinator --exit-when-stopped: a task stopped on a failing record
       (PROCESSOR_ON_ERROR=stop); processor local then exits 1
  130  interrupted (Ctrl-C)
"""


def _version() -> str:
    try:
        return importlib.metadata.version("processor")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def _settings_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    for name, kind, text in _SETTING_FLAGS:
        parent.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, help=text)
    more = parent.add_argument_group(
        "more settings", "each also PROCESSOR_<NAME> (docs/operations.md: Configuration)"
    )
    for name, options in _generated_flags().items():
        more.add_argument("--" + name.replace("_", "-"), dest=name, **options)
    return parent


def _generated_flags() -> dict[str, dict[str, Any]]:
    """A flag for every other setting, made from its type in `Settings`: choices for a
    Literal, --x/--no-x for a bool. None for secrets (a command line is visible to every user
    of the machine: PROCESSOR_SECRETS_DIR or the environment) or the Kafka client's map."""
    written = {name for name, _, _ in _SETTING_FLAGS}
    flags: dict[str, dict[str, Any]] = {}
    for name, field in Settings.model_fields.items():
        kind = field.annotation
        if name in written or kind in (SecretStr, dict[str, SecretStr]):
            continue
        default = field.get_default(call_default_factory=False)
        shown = (
            ""
            if default is PydanticUndefined
            else "; unset by default"
            if default is None
            else f"; default {default!r}"
            if isinstance(default, str)
            else f"; default {default}"
        )
        options: dict[str, Any] = {"help": f"PROCESSOR_{name.upper()}{shown}"}
        if typing.get_origin(kind) is typing.Literal:
            options["choices"] = list(typing.get_args(kind))
        elif kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif kind in (int, int | None):
            options["type"] = int
        else:
            options["type"] = str  # str, Path, a directory or s3:// location: checked later
        flags[name] = options
    return flags


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = [name for name, _, _ in _SETTING_FLAGS] + list(_generated_flags())
    return {name: getattr(args, name, None) for name in names}


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    settings = load_settings(**_overrides(args), **extra)
    if "job_name" in settings.model_fields_set:  # PROCESSOR_JOB_NAME (or a secret file)
        return settings
    from processor.jobs import default_job_name

    return load_settings(**{**_overrides(args), **extra, "job_name": default_job_name(settings)})


# The coordinator's metrics port as `processor local` serves it (status, state ask it).
COORDINATOR_URL = "http://127.0.0.1:9400"
FORMATS = ("json", "text", "bytes")  # of processor tail (commands/tail.py)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="processor",
        description="Exactly-once stream processing on Kafka.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"processor {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _settings_parent()

    sub.add_parser(
        "kafka",
        help="start|stop|status the local Kafka broker, or a cluster (--brokers 3)",
        add_help=False,
    )

    coord = sub.add_parser("coordinator", parents=[common], help="run the job's coordinator")
    coord.add_argument("--exit-when-idle", action="store_true", help="stop once all input is done")
    coord.add_argument(
        "--exit-when-stopped",
        action="store_true",
        help="exit with 3 once a task stops on a failing record (PROCESSOR_ON_ERROR=stop)",
    )

    sub.add_parser("worker", parents=[common], help="run a worker")

    local = sub.add_parser(
        "local", parents=[common], help="coordinator + N workers on this machine"
    )
    local.add_argument(
        "--workers", type=int, default=2, help="worker processes to run (default: 2)"
    )
    local.add_argument("--until-idle", action="store_true", help="stop once all input is done")

    produce = sub.add_parser("produce", parents=[common], help="lines of text files into a topic")
    produce.add_argument("--topic", required=True, help="the topic to write (created if missing)")
    produce.add_argument("--partitions", type=int, default=4, help="if the topic is created")
    produce.add_argument(
        "--once", action="store_true", help="produce nothing if the topic already has records"
    )
    produce.add_argument("files", nargs="+", type=Path, help="text files, one record per line")

    counts = sub.add_parser(
        "counts",
        parents=[common],
        help="word count: the final count per word in committed output (any other sink: "
        "tail --latest)",
    )
    counts.add_argument("--topic", help="default: the output topic")
    counts.add_argument("--top", type=int, default=20, help="words to show (default: 20)")

    savepoint = sub.add_parser(
        "savepoint", parents=[common], help="take, list or delete savepoints of the job"
    )
    savepoint.add_argument("--name", help="default: <job>-<UTC date and time>")
    savepoint.add_argument("--list", action="store_true", help="list the job's savepoints")
    savepoint.add_argument(
        "--all-jobs", action="store_true", help="with --list: every job's savepoints in the storage"
    )
    savepoint.add_argument("--delete", metavar="NAME", help="delete one of the job's savepoints")
    savepoint.add_argument(
        "--force", action="store_true", help="with --delete: also another job's, or a corrupt one"
    )
    savepoint.add_argument("--timeout", type=float, default=120, help="seconds to wait")
    savepoint.add_argument(
        "--last-completed",
        action="store_true",
        help="copy the last completed checkpoint now rather than wait for the next one "
        "(a job that is stopped)",
    )

    acls_command.add_parser(sub, common)
    postgres_command.add_parser(sub, common)
    nexmark_command.add_parser(sub, common)
    status = sub.add_parser("status", help="the coordinator's checkpoint and task status")
    status.add_argument("--url", default=COORDINATOR_URL, help="coordinator's metrics URL")
    status.add_argument("--history", type=int, default=10, help="checkpoints to show")

    state = sub.add_parser(
        "state",
        help="queryable state: a key's committed value from the workers (docs/query-state.md)",
    )
    state_sub = state.add_subparsers(dest="state_command", required=True, help="get or scan")
    state_get = state_sub.add_parser("get", help="one key's value, as of its last checkpoint")
    state_get.add_argument("operator", help="the operator's name (name=, or derived)")
    state_get.add_argument("key", help="the key as a sink shows it; <key>@<start> for a window")
    state_scan = state_sub.add_parser("scan", help="an operator's keys and values")
    state_scan.add_argument("operator", help="the operator's name (name=, or derived)")
    state_scan.add_argument("--prefix", default="", help="keys starting with this text only")
    state_scan.add_argument("--limit", type=int, default=100, help="per worker, at most 1,000")
    for command in (state_get, state_scan):
        command.add_argument(
            "--url",
            action="append",
            help="the coordinator's metrics URL, which forwards to the owning worker (default "
            f"{COORDINATOR_URL}), or a worker's, repeated; token: PROCESSOR_API_TOKEN",
        )
        command.add_argument(
            "--fresh", action="store_true", help="the live value, not yet committed"
        )

    tail = sub.add_parser(
        "tail", parents=[common], help="what a topic holds, committed, decoded (any sink)"
    )
    tail.add_argument("topic", help="the topic to read: a sink, a source, the DLQ")
    tail.add_argument(
        "--from-beginning",
        action="store_true",
        help="every record, not the last 10 of each partition",
    )
    tail.add_argument("--follow", action="store_true", help="then wait for more, until Ctrl-C")
    tail.add_argument(
        "--latest",
        action="store_true",
        help="per key, only its last record, from the beginning (an aggregation's current "
        "values), sorted by key",
    )
    tail.add_argument(
        "--format",
        choices=["json", "text", "bytes"],
        default="json",
        help="of the values (default: json)",
    )
    tail.add_argument(
        "--key-format",
        choices=["json", "text", "bytes"],
        default="text",
        help="of the keys (default: text)",
    )
    tail.add_argument(
        "--meta", action="store_true", help="partition:offset and the record's time first"
    )

    corpus = sub.add_parser("corpus", help="word count: write a seeded Zipf text corpus")
    corpus.add_argument(
        "--words", type=int, default=1_000_000, help="words to write (default: 1,000,000)"
    )
    corpus.add_argument("--seed", type=int, default=1, help="the same seed, the same corpus")
    corpus.add_argument(
        "--vocab", type=int, default=50_000, help="distinct words (default: 50,000)"
    )
    corpus.add_argument("out", type=Path, help="the file to write")

    demo = sub.add_parser("demo", parents=[common], help="word count end to end on a local broker")
    demo.add_argument(
        "--words", type=int, default=2_000_000, help="words to feed (default: 2,000,000)"
    )
    demo.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    demo.add_argument("--top", type=int, default=15, help="words to show (default: 15)")
    return parser


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kafka"]:
        from processor.localkafka import cluster

        return cluster.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (SettingsError, PipelineError) as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    command: str = args.command
    if command == "status":
        from processor.commands import status

        try:
            print(status.render(status.fetch(args.url), args.history))
        except status.StatusUnavailable as exc:
            print(f"processor: {exc}", file=sys.stderr)
            return 1
        return 0
    if command == "state":
        from processor.commands import state

        return state.main(
            args.state_command,
            args.url or [COORDINATOR_URL],
            args.operator,
            getattr(args, "key", ""),
            getattr(args, "prefix", ""),
            getattr(args, "limit", 100),
            load_settings().api_token.get_secret_value(),
            args.fresh,
        )
    if command == "corpus":
        from processor.commands import corpus

        lines = corpus.write(args.out, args.words, args.seed, args.vocab)
        print(f"wrote {args.words:,} words in {lines:,} lines to {args.out}")
        return 0

    settings = _settings(args)
    configure_logging(settings.log_level, settings.worker_id or command, settings.log_format)
    from processor import metrics

    if command == "coordinator":
        from processor.commands.local import EXIT_STOPPED
        from processor.coordinator.service import CoordinatorService

        # The coordinator serves /metrics with its status page and API on the same port.
        stopped = CoordinatorService(settings).run(
            _stop_event(), args.exit_when_idle, args.exit_when_stopped
        )
        return EXIT_STOPPED if stopped else 0
    if command == "worker":
        from processor.worker.service import Worker

        worker = Worker(settings)
        token = settings.api_token.get_secret_value()
        port, host, names = settings.metrics_port, settings.metrics_host, settings.http_host_names
        routes = worker.state_routes()
        metrics.serve(port, host, worker.health, worker.worker_id, token, routes, names)
        worker.run(_stop_event())
        return 0
    if command == "local":
        from processor.commands.local import free_ports, run_local
        from processor.jobs import load_graph

        load_graph(settings)  # a pipeline that cannot run fails here, before any process starts

        # Metrics and the status page are on by default here: 9400 and up (the next free
        # block beside another job), unless set.
        port = settings.metrics_port
        if args.metrics_port is None and "PROCESSOR_METRICS_PORT" not in os.environ:
            port = free_ports(args.workers + 1, host=settings.metrics_host)
        return run_local(args.workers, _env(args), _stop_event(), args.until_idle, port)
    if command == "produce":
        from processor.commands.produce import produce_lines

        sent = produce_lines(settings, args.topic, args.files, args.partitions, once=args.once)
        if sent < 0:
            print(f"{args.topic} already has records: nothing produced (--once)")
        else:
            print(f"produced {sent:,} lines to {args.topic}")
        return 0
    if command == "counts":
        from processor.commands.counts import read_final_counts, top, topic_exists

        topic = args.topic or settings.output_topic
        if not topic_exists(settings, topic):
            print(f"processor: topic {topic!r} does not exist", file=sys.stderr)
            return 2
        try:
            final = read_final_counts(settings, topic)
        except ValueError as exc:  # a sink of anything but word count's integers
            print(
                f"processor counts reads word count's output (integer values); {topic} holds "
                f"others ({exc}): `processor tail {topic} --latest` shows any sink's values",
                file=sys.stderr,
            )
            return 2
        for word, count in top(final, args.top):
            print(f"{count:>12,}  {word}")
        print(f"{len(final):,} distinct keys, {sum(final.values()):,} in total")
        return 0
    if command == "savepoint":
        return _savepoint(args, settings)
    if command == "tail":
        from processor.commands.tail import TailOptions, tail

        if args.latest and args.follow:
            raise SettingsError("processor tail: --latest or --follow, not both")
        options = TailOptions(
            args.from_beginning or args.latest,
            args.follow,
            args.format,
            args.key_format,
            args.meta,
            args.latest,
        )
        stop = _stop_event()
        tail(settings, args.topic, options, stopped=stop.is_set)
        return 0
    if command == "postgres":
        return postgres_command.command(settings, args.dsn, args.resolve)
    if command == "acls":
        return acls_command.command(settings, args)
    if command == "nexmark":
        return nexmark_command.command(settings, args)
    if command == "demo":
        from processor.commands.demo import run_demo

        return run_demo(settings, args.words, args.workers, args.top, _env(args))
    raise AssertionError(command)


def _savepoint(args: argparse.Namespace, settings: Settings) -> int:
    from processor.commands import savepoint
    from processor.state.factory import open_storage
    from processor.state.savepoints import SavepointError, SavepointStore, check_name

    try:
        if args.list:
            store = SavepointStore(open_storage(settings))
            for name in store.names():
                try:
                    sp = store.read(name)
                except SavepointError as exc:
                    print(f"{name}  unreadable: {exc}")
                    continue
                if args.all_jobs or sp.job == settings.job_name:
                    print(f"{name}  job {sp.job}, checkpoint {sp.checkpoint_id}, {sp.created_at}")
            return 0
        if args.delete:
            job = None if args.force else settings.job_name
            SavepointStore(open_storage(settings)).delete(args.delete, job)
            print(f"deleted savepoint {args.delete}")
            return 0
        name = args.name or f"{settings.job_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        check_name(name)
        taken = savepoint.take(settings, name, args.timeout, args.last_completed)
    except SavepointError as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 1
    print(
        f"savepoint {taken.name}: checkpoint {taken.checkpoint_id} of job {taken.job}, "
        f"{len(taken.tasks)} keyed tasks (start a job from it with --from-savepoint {taken.name})"
    )
    return 0


def _env(args: argparse.Namespace) -> dict[str, str]:
    """CLI overrides as environment for child processes."""
    return {f"PROCESSOR_{k.upper()}": str(v) for k, v in _overrides(args).items() if v is not None}


if __name__ == "__main__":
    sys.exit(main())
