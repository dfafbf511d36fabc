"""``processor nexmark generate``: the ``nexmark`` crate's (0.2.0) events into a topic, fast.

Events come from a generator this project did not write: the crate's own binary, run as
``nexmark --no-wait --number N``, one JSON line per event (``{"Person": ...}``,
``{"Auction": ...}`` or ``{"Bid": ...}``). Every line is one record, its value the line as the
crate printed it, without a key: every Nexmark query keys its events again by what it needs
(auction, seller, window), so an input key would only cost bytes and a hash per record.

The lines go to the partitions in blocks of consecutive lines, round robin: one read of the
generator's output a block (up to 1 MB; what its pipe holds, some 64 KB or 20 ms of event
time). A partition gets large batches, and holds its events in the order the crate made
them, which is event-time order (the crate's default ``out_of_order_group_size`` is 1): a
source with the queries' out-of-orderness (1 s) never finds an event behind its watermark.

The generator is first run alone (its output read and dropped) and then with the load, and
both rates are printed: what the load costs is the difference.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.commands.produce import written_before
from processor.config import Settings
from processor.kafka import clients
from processor.kafka.replication import topic_replication

VERSION = "0.2.0"
INSTALL = ["cargo", "install", "--locked", "nexmark", "--version", VERSION, "--features", "bin"]
BLOCK = 1 << 20  # at most, bytes of the generator's output read at once: one block
CLOSING_MS = 60_000  # the closing events' time after the last event: past every window


class NexmarkError(Exception):
    """The binary is missing or failed, or the topic already holds records."""


@dataclass(frozen=True)
class Rate:
    events: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def add_arguments(nexmark: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``processor nexmark generate`` in the command line."""
    commands = nexmark.add_subparsers(dest="nexmark_command", required=True, help="generate")
    gen = commands.add_parser(
        "generate",
        parents=[common],
        help=f"run `nexmark --no-wait` (the crate, {VERSION}) and load every line into a topic",
    )
    gen.add_argument("--events", type=int, required=True, help="how many events")
    gen.add_argument("--topic", default="nexmark", help="the topic (default nexmark)")
    gen.add_argument("--partitions", type=int, default=2, help="of a new topic (default 2)")
    gen.add_argument(
        "--closing",
        action="store_true",
        help=f"then one Person (id 0, joins nothing) per partition {CLOSING_MS // 1000} s of "
        "event time after the last event: every window and timer of the events closes",
    )
    gen.add_argument(
        "--rate",
        type=float,
        default=0,
        help="at most this many events/s (default 0: as fast as it goes); 10000 is the "
        "crate's own event rate, as `nexmark` without --no-wait sends them",
    )
    gen.add_argument(
        "--install", action="store_true", help=f"if the binary is missing: {' '.join(INSTALL)}"
    )
    gen.add_argument("--binary", type=Path, help="the crate's binary (default: PATH, ~/.cargo/bin)")


def run(args: argparse.Namespace) -> int:
    """``processor nexmark generate``: events into the topic, and how fast."""
    from processor.commands import base

    settings = base.setup(args)
    if args.events < 1 or args.partitions < 1 or args.rate < 0:
        print("processor: --events and --partitions at least 1, --rate 0 or more", file=sys.stderr)
        return 2
    try:
        binary = args.binary or find_binary(install=args.install)
        alone = generator_rate(binary, args.events)
        loaded = load(
            settings, binary, args.events, args.topic, args.partitions, args.closing, args.rate
        )
    except NexmarkError as exc:
        print(f"processor: {exc}", file=sys.stderr)
        return 1
    print(
        f"generator alone: {alone.events:,} events in {alone.seconds:.2f} s, "
        f"{alone.per_second:,.0f} events/s (its output read and dropped)"
    )
    print(
        f"loader: {loaded.events:,} events into {args.topic} in {loaded.seconds:.2f} s, "
        f"{loaded.per_second:,.0f} events/s (generated, produced and every record acknowledged)"
    )
    return 0


def find_binary(install: bool = False) -> Path:
    """The crate's binary on PATH or in ~/.cargo/bin; with ``install``, built when missing."""
    found = shutil.which("nexmark") or shutil.which("nexmark", path=str(cargo_bin()))
    if found:
        version = cargo_version(Path(found))
        if version not in (None, VERSION):
            raise NexmarkError(
                f"{found} is nexmark {version}, not {VERSION}: {' '.join(INSTALL)} --force"
            )
        return Path(found)
    if not install:
        raise NexmarkError(f"the nexmark binary is missing; install it: {' '.join(INSTALL)}")
    if shutil.which("cargo") is None and not (cargo_bin() / "cargo").exists():
        raise NexmarkError("the nexmark binary is missing and so is cargo (https://rustup.rs)")
    cargo = shutil.which("cargo") or str(cargo_bin() / "cargo")
    if subprocess.run([cargo, *INSTALL[1:]], check=False).returncode != 0:
        raise NexmarkError(f"{' '.join(INSTALL)} failed")
    return cargo_bin() / "nexmark"


def cargo_bin() -> Path:
    return Path.home() / ".cargo" / "bin"


def cargo_version(binary: Path) -> str | None:
    """The crate version cargo installed ``binary`` from (its ~/.cargo/.crates2.json), None
    for a binary cargo did not install there."""
    if binary.parent != cargo_bin():
        return None
    try:
        installs = json.loads((cargo_bin().parent / ".crates2.json").read_text())["installs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for package, install in installs.items():
        name, _, rest = str(package).partition(" ")
        if name == "nexmark" and binary.name in install.get("bins", []):
            return rest.split(" ", 1)[0]
    return None


def blocks(binary: Path, events: int) -> Iterator[list[bytes]]:
    """The generator's lines, a block (one read of its pipe) at a time; raises if it fails."""
    args = [str(binary), "--no-wait", "--number", str(events)]
    with subprocess.Popen(args, stdout=subprocess.PIPE, bufsize=0) as proc:
        assert proc.stdout is not None
        rest = b""
        while chunk := proc.stdout.read(BLOCK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            yield lines
        if rest:
            yield [rest]
    if proc.returncode != 0:
        raise NexmarkError(f"{' '.join(args)} exited with {proc.returncode}")


def generator_rate(binary: Path, events: int) -> Rate:
    """The generator alone: its lines read (as `load` reads them) and dropped."""
    start = time.perf_counter()
    count = sum(len(block) for block in blocks(binary, events))
    return Rate(count, time.perf_counter() - start)


def load(
    settings: Settings,
    binary: Path,
    events: int,
    topic: str,
    partitions: int,
    closing: bool = False,
    rate: float = 0,
) -> Rate:
    """Every line of ``nexmark --no-wait --number events`` into ``topic`` (created with
    ``partitions`` if missing, refused if it holds records), blocks round robin over its
    partitions; with ``closing``, a closing event at the end of every partition. ``rate``
    (events/s, 0: none) paces the load: a live stream for a job that already runs."""
    admin = clients.admin(settings)
    count = clients.ensure_topic(
        admin, topic, partitions, replication=topic_replication(settings, admin)
    )
    if written_before(settings, topic, count):
        raise NexmarkError(f"{topic} already holds records: generate into a new topic")
    producer = clients.producer(settings, **{"enable.idempotence": True, "linger.ms": 50})
    start = time.perf_counter()
    sent, last = 0, 0
    for index, block in enumerate(blocks(binary, events)):
        partition = index % count
        for line in block:
            clients.produce_waiting(producer, topic, line, partition)
        sent += len(block)
        if block:
            last = max(last, event_time(block[-1]))
        producer.poll(0)
        if rate and (ahead := sent / rate - (time.perf_counter() - start)) > 0:
            time.sleep(ahead)
    if closing and sent:
        for partition in range(count):
            # Waiting too: right after the last block the queue may be full.
            clients.produce_waiting(producer, topic, closing_event(last + CLOSING_MS), partition)
    left = producer.flush(120)
    if left:
        raise NexmarkError(f"{left} records to {topic} were not acknowledged by the broker")
    return Rate(sent, time.perf_counter() - start)


def event_time(line: bytes) -> int:
    """``date_time`` of the event a line holds."""
    event: dict[str, dict[str, Any]] = json.loads(line)
    return int(next(iter(event.values()))["date_time"])


def closing_event(at_ms: int) -> bytes:
    """A Person at ``at_ms`` whom no auction names (ids start at 1000) and whom no query
    outputs: it moves every partition's watermark past the events' windows and timers."""
    person = {
        "id": 0,
        "name": "closing",
        "email_address": "closing@nexmark.invalid",
        "credit_card": "0000 0000 0000 0000",
        "city": "cheyenne",
        "state": "wy",
        "date_time": at_ms,
        "extra": "",
    }
    return json.dumps({"Person": person}, separators=(",", ":")).encode()
