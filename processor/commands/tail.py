"""``processor tail TOPIC``: what any topic holds, as committed (read_committed), decoded.

One line per record, ``key<TAB>value`` (``--meta`` puts ``partition:offset`` and the record's
time first). By default the last 10 records of each partition, ``--from-beginning`` all of
them; ``--follow`` then waits for more until Ctrl-C; ``--latest`` reads them all and shows
each key's last record only, sorted by key (an aggregation's changelog as a table). A value
the format cannot decode is shown as Python bytes rather than ending the command: a sink may
hold anything.

Example::

    processor tail counts --from-beginning --format json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from confluent_kafka import Message, TopicPartition

from processor.config import Settings
from processor.kafka import clients
from processor.serde import BYTES, JSON, TEXT
from processor.serde.codec import RecordError

FORMATS = ("json", "text", "bytes")
_SERDES = {"json": JSON, "text": TEXT, "bytes": BYTES}
LAST = 10  # records per partition without --from-beginning
STALL_S = 30.0  # without --follow: give up on a partition that stops moving this long


@dataclass(frozen=True)
class TailOptions:
    from_beginning: bool = False
    follow: bool = False
    value_format: str = "json"
    key_format: str = "text"
    meta: bool = False
    latest: bool = False  # per key, only its last record, sorted by key


def show(raw: bytes | None, fmt: str) -> str:
    """``raw`` as text in ``fmt``: JSON compact, text as it is, bytes (or anything that does
    not decode) as a Python bytes literal; a missing key or value is ``-``.

    >>> show(b'{"a": 1}', "json"), show(b"\\xff", "json"), show(None, "text")
    ('{"a":1}', "b'\\\\xff'", '-')
    """
    if raw is None:
        return "-"
    if fmt == "bytes":
        return repr(raw)
    try:
        value = _SERDES[fmt].loads(raw)
    except RecordError:
        return repr(raw)
    if fmt == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def line(msg: Message, options: TailOptions) -> str:
    """The line ``msg`` is shown as."""
    text = f"{show(msg.key(), options.key_format)}\t{show(msg.value(), options.value_format)}"
    if not options.meta:
        return text
    _, ms = msg.timestamp()
    at = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return f"{msg.partition()}:{msg.offset()}\t{at}\t{text}"


def tail(
    settings: Settings,
    topic: str,
    options: TailOptions,
    out: TextIO = sys.stdout,
    stopped: Callable[[], bool] = lambda: False,
) -> int:
    """Print the records; returns how many. Exit once every partition's committed end (as
    it was at the start) is reached, unless ``options.follow``."""
    count = 0
    if options.latest:
        last: dict[bytes | None, str] = {}
        for msg in _records(settings, topic, options, stopped):
            last[msg.key()] = line(msg, options)
        for key in sorted(last, key=lambda k: (k is not None, k or b"")):
            print(last[key], file=out)
        return len(last)
    for msg in _records(settings, topic, options, stopped):
        print(line(msg, options), file=out, flush=options.follow)
        count += 1
    return count


def _records(
    settings: Settings, topic: str, options: TailOptions, stopped: Callable[[], bool]
) -> Iterator[Message]:
    consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.tail"})
    try:
        partitions = clients.topic_partitions(consumer, topic, 30)
        if not partitions:
            raise SystemExit(f"processor: topic {topic!r} does not exist")
        ends: dict[int, int] = {}
        starts = []
        for p in range(partitions):
            low, high = clients.watermark_offsets(consumer, TopicPartition(topic, p))
            start = low if options.from_beginning else max(low, high - LAST)
            starts.append(TopicPartition(topic, p, start))
            if high > start:
                ends[p] = high
        consumer.assign(starts)
        progress = time.monotonic()
        while not stopped() and (ends or options.follow):
            for msg in consumer.consume(1000, 0.2):
                progress = time.monotonic()
                if msg.error() is None:
                    yield msg
            # read_committed skips aborted records and markers: the position says where it is.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
            if ends and not options.follow and time.monotonic() - progress > STALL_S:
                print(
                    f"processor: {topic} partitions {sorted(ends)} did not reach their end in "
                    f"{STALL_S:.0f} s (a transaction still open?)",
                    file=sys.stderr,
                )
                return
    finally:
        consumer.close()


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", help="the topic to read: a sink, a source, the DLQ")
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="every record, not the last 10 of each partition",
    )
    parser.add_argument("--follow", action="store_true", help="then wait for more, until Ctrl-C")
    parser.add_argument(
        "--latest",
        action="store_true",
        help="per key, only its last record, from the beginning (an aggregation's current "
        "values), sorted by key",
    )
    parser.add_argument(
        "--format", choices=list(FORMATS), default="json", help="of the values (default: json)"
    )
    parser.add_argument(
        "--key-format", choices=list(FORMATS), default="text", help="of the keys (default: text)"
    )
    parser.add_argument(
        "--meta", action="store_true", help="partition:offset and the record's time first"
    )


def run(args: argparse.Namespace) -> int:
    """``processor tail``: the topic's committed records, decoded."""
    from processor.commands import base
    from processor.config import SettingsError

    settings = base.setup(args)
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
    tail(settings, args.topic, options, stopped=base.stop_event().is_set)
    return 0
