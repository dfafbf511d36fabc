"""How long a RocksDB checkpoint stops the other Python threads of its process.

rocksdict holds the GIL for the whole of a call. A keyed task's checkpoint flushes the
memtable (disk I/O); if ``create_checkpoint`` does that flush itself, every other task thread
of the worker waits for it. `RocksDBStore.checkpoint` starts the flush in RocksDB's own thread
and sleeps until it is done instead. This measures both ways: a second thread counts in a
loop, and its count during the checkpoint, divided by its rate when alone, is the time it
got to run.

    python bench/experiments/gil_checkpoint.py [--keys 200000] [--rounds 5]

Prints one line per round and way; no broker needed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rocksdict import Checkpoint

from processor.state.rocksdb.store import RocksDBStore


class SpinCounter(threading.Thread):
    """Counts in a loop until stopped; ``rate`` is its count per second when alone."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.stopped = False
        self.rate = 0.0

    def run(self) -> None:
        while not self.stopped:
            self.count += 1

    def calibrate(self) -> None:
        time.sleep(0.05)
        before, started = self.count, time.perf_counter()
        time.sleep(0.2)
        self.rate = (self.count - before) / (time.perf_counter() - started)


def measure(store: RocksDBStore, take: Callable[[Path], None], dest: Path) -> tuple[float, float]:
    """(ms the checkpoint took, ms the other thread ran meanwhile)."""
    counter = SpinCounter()
    counter.start()
    counter.calibrate()
    before, started = counter.count, time.perf_counter()
    take(dest)
    took = time.perf_counter() - started
    ran = (counter.count - before) / counter.rate
    counter.stopped = True
    counter.join()
    return took * 1000, ran * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000, help="keys written per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gil-checkpoint-") as tmp:
        store = RocksDBStore(Path(tmp) / "db")

        def inline(dest: Path) -> None:  # the flush inside create_checkpoint, GIL held
            Checkpoint(store._db).create_checkpoint(str(dest))

        ways: dict[str, Callable[[Path], None]] = {
            "flush inside create_checkpoint": inline,
            "RocksDBStore.checkpoint": store.checkpoint,
        }
        ratios: dict[str, list[float]] = {name: [] for name in ways}
        for i in range(args.rounds):
            for w, (name, take) in enumerate(ways.items()):
                store.write({b"k%d-%d-%d" % (i, w, k): b"v" * 20 for k in range(args.keys)})
                took, ran = measure(store, take, Path(tmp) / f"chk-{i}-{w}")
                ratios[name].append(ran / took)
                print(f"round {i}: {name}: {took:.1f} ms, the other thread ran {ran:.1f} ms")
        store.close()
    for name, values in ratios.items():
        print(f"{name}: the other thread ran {statistics.median(values):.0%} of the time (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
