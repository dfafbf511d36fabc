"""How long a snapshot upload takes beside a busy Python thread, in the task's process and in
a SnapshotProcess of its own.

Every system call of an upload releases the GIL, and taking it back waits up to the switch
interval behind a thread that keeps it busy (a task thread working through a batch). This
uploads the same RocksDB checkpoints (``--keys`` new keys each) to a directory, once with a
spinning thread beside the uploading one and once without, both ways; it prints the median
and the maximum per way. No broker needed.

    python bench/experiments/snapshot_gil.py [--rounds 20] [--keys 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.gil_checkpoint import SpinCounter
from processor.config import Settings
from processor.state.factory import open_storage
from processor.state.rocksdb.snapshot_process import SnapshotProcess
from processor.state.rocksdb.snapshots import SnapshotStore
from processor.state.rocksdb.store import RocksDBStore

Upload = Callable[[int, Path], object]


def _rounds(tmp: Path, upload: Upload, rounds: int, keys: int, busy: bool) -> list[float]:
    """ms per upload of ``rounds`` checkpoints, each with ``keys`` new keys."""
    took: list[float] = []
    spinner = SpinCounter() if busy else None
    if spinner is not None:
        spinner.start()
    with RocksDBStore(tmp / "db") as store:
        for i in range(1, rounds + 1):
            store.write({b"k%d-%d" % (i, k): b"v" * 20 for k in range(keys)})
            local = tmp / f"chk-{i}"
            store.checkpoint(local)
            started = time.perf_counter()
            upload(i, local)
            took.append((time.perf_counter() - started) * 1000)
            time.sleep(0.02)
    if spinner is not None:
        spinner.stopped = True
        spinner.join()
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--keys", type=int, default=3000, help="new keys per checkpoint")
    args = parser.parse_args(argv)
    for busy in (False, True):
        beside = "beside a busy thread" if busy else "alone"
        for way in ("in the task's process", "in a SnapshotProcess"):
            with tempfile.TemporaryDirectory(prefix="snapshot-gil-") as name:
                tmp = Path(name)
                settings = Settings(checkpoint_dir=tmp / "storage")
                if way == "in a SnapshotProcess":
                    child = SnapshotProcess(settings, "job/task", "task")
                    child.open(None)

                    def upload(i: int, local: Path, child: SnapshotProcess = child) -> object:
                        return child.upload(i, local, {}).result()

                    try:
                        took = _rounds(tmp, upload, args.rounds, args.keys, busy)
                    finally:
                        child.close()
                else:
                    store = SnapshotStore(open_storage(settings), "job/task", 1)
                    took = _rounds(tmp, store.upload, args.rounds, args.keys, busy)
            print(
                f"{beside}, {way}: upload {statistics.median(took):.1f} ms median, "
                f"{max(took):.1f} ms max ({args.rounds} rounds)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
