"""A kept chaos run, read from its brokers' files with no broker running.

    PROCESSOR_TEST_CHAOS_KEEP=/tmp/keep python -m pytest tests/integration/test_chaos.py ...
    python -m tests.postmortem /tmp/keep/chaos-seed2-...        # anomalies, broken words
    python -m tests.postmortem /tmp/keep/chaos-seed2-... --word pequshi   # one word's updates

Word count's output (``<job>.counts``) per word: every committed update in log order with the
producer id, epoch and offset that wrote it, and where the values stop increasing (a repeated
value: an epoch's output committed twice; a smaller one: a state older than its output). And
the transaction anomalies of `tests.anomalies` over the output, the shuffles and the group's
offset commits (transactions only: no reads to compare offline). A partition is read from the
replica with the most bytes, since which broker led it last is not known offline.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests import anomalies

_BATCH = re.compile(r"^baseOffset: \d+ .*?producerId: (-?\d+) producerEpoch: (-?\d+) ")
_RECORD = re.compile(r"^\| offset: (\d+) .*?key: (\S+) payload: (\S+)")


@dataclass(frozen=True)
class Update:
    value: int
    offset: int
    producer: int
    epoch: int


def data_dirs(run: Path) -> list[Path]:
    """Each broker's ``log.dirs`` in a kept run (one broker's, or a cluster's nodes')."""
    single = run / "kafka" / "data"
    return [single] if single.is_dir() else sorted(run.glob("kafka/node-*/data"))


def partition_files(run: Path, pattern: str) -> list[Path]:
    """The segment files of each partition matching ``pattern``, from its fullest replica."""
    replicas: dict[str, list[Path]] = defaultdict(list)
    for data in data_dirs(run):
        for part in data.glob(pattern):
            replicas[part.name].append(part)
    files: list[Path] = []
    for name in sorted(replicas):
        fullest = max(replicas[name], key=lambda d: sum(f.stat().st_size for f in d.glob("*.log")))
        files += sorted(fullest.glob("*.log"))
    return files


def job_of(run: Path) -> str:
    for data in data_dirs(run):
        for part in data.glob("*.counts-0"):
            return part.name.removesuffix(".counts-0")
    raise SystemExit(f"{run}: no <job>.counts topic (not a word-count chaos run)")


def check(run: Path) -> anomalies.Anomalies:
    """`tests.anomalies.find_anomalies` on the kept files (transactions, not reads)."""
    job = job_of(run)
    files: list[Path] = []
    for pattern in (f"{job}.counts-*", f"{job}.shuffle-*", f"{anomalies.OFFSETS_LOG}-*"):
        files += partition_files(run, pattern)
    segments = anomalies.parse_segments(anomalies.dump_lines(files, "--deep-iteration"))
    txn_files = partition_files(run, f"{anomalies.TXN_LOG}-*")
    txn_log = anomalies.parse_txn_log(anomalies.dump_lines(txn_files, "--transaction-log-decoder"))
    return anomalies.find_anomalies(segments, txn_log, {}, f"{job}.")


def committed_updates(lines: Iterable[str]) -> dict[str, list[Update]]:
    """Per key, the updates of committed transactions in log order, from ``DumpLogSegments
    --deep-iteration --print-data-log`` of one partition's segments."""
    pending: dict[int, list[tuple[str, Update]]] = defaultdict(list)  # producer -> open data
    updates: dict[str, list[Update]] = defaultdict(list)
    producer = epoch = -1
    for line in lines:
        batch = _BATCH.match(line)
        if batch is not None:
            producer, epoch = int(batch[1]), int(batch[2])
        elif "endTxnMarker: COMMIT" in line:
            for key, update in pending.pop(producer, []):
                updates[key].append(update)
        elif "endTxnMarker: ABORT" in line:
            pending.pop(producer, None)
        elif (record := _RECORD.match(line)) is not None:
            update = Update(int(record[3]), int(record[1]), producer, epoch)
            pending[producer].append((record[2], update))
    for values in updates.values():
        values.sort(key=lambda u: u.offset)  # commits close data in marker order
    return updates


def breaks(values: list[Update]) -> list[int]:
    return [i for i in range(1, len(values)) if values[i].value <= values[i - 1].value]


def main() -> int:
    parser = argparse.ArgumentParser(description="A kept chaos run, read offline.")
    parser.add_argument("run", type=Path, help="a run directory PROCESSOR_TEST_CHAOS_KEEP kept")
    parser.add_argument("--word", help="print every committed update of this word")
    args = parser.parse_args()
    job = job_of(args.run)
    broken = 0
    for part in partition_files(args.run, f"{job}.counts-*"):
        options = ("--deep-iteration", "--print-data-log")
        for word, values in committed_updates(anomalies.dump_lines([part], *options)).items():
            found = breaks(values)
            broken += bool(found)
            if word == args.word or (found and broken <= 3):
                print(f"{part.parent.name} {word}: {len(values)} updates, breaks at {found[:10]}")
                shown = values if word == args.word else values[max(0, found[0] - 3) : found[0] + 3]
                for u in shown:
                    print(f"  {u.value:>8} offset {u.offset} producer {u.producer} epoch {u.epoch}")
    print(f"{broken} words whose updates stop increasing")
    print(f"anomalies: {check(args.run).to_json()}")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
