"""The GIL's convoy effect in a worker, and what ``PROCESSOR_GIL_SWITCH_INTERVAL_US`` does to it.

A worker runs every task of its share in one interpreter: source tasks that tokenize (CPU,
GIL held) beside tasks on a checkpoint's path that make many short calls which release the GIL
(a commit's round trip, a RocksDB flush waited for, a fetch). Each such call ends with the
thread waiting for the GIL again, and a CPU-bound thread gives it up only when its switch
interval has run out: Python's default is 5 ms, per call. This measures it without a broker:
``--spinners`` threads count in a loop (the CPU-bound tasks) while one thread makes
``--calls`` calls of ``time.sleep(0.001)`` (1 ms without the GIL), per switch interval:

* ``ms per call``: the caller's wall time per 1 ms call (1.0 would be no convoy);
* ``spin rate``: the spinners' counts per second, against the default interval's (what the
  extra switches cost the CPU-bound threads).

    python bench/gil_convoy.py [--spinners 3] [--calls 200] [--intervals-us 5000,1000,500,200]

Prints one row per interval; no broker needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gil_checkpoint import SpinCounter


def measure(spinners: int, calls: int, interval_s: float) -> tuple[float, float]:
    """(wall ms per 1 ms GIL-free call, the spinners' total count per second)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    threads = [SpinCounter() for _ in range(spinners)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.05)
        before = sum(t.count for t in threads)
        started = time.perf_counter()
        for _ in range(calls):
            time.sleep(0.001)
        took = time.perf_counter() - started
        counted = sum(t.count for t in threads) - before
    finally:
        for t in threads:
            t.stopped = True
        for t in threads:
            t.join()
        sys.setswitchinterval(previous)
    return took * 1000 / calls, counted / took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spinners", type=int, default=3, help="CPU-bound threads")
    parser.add_argument("--calls", type=int, default=200, help="1 ms GIL-free calls")
    parser.add_argument("--intervals-us", default="5000,1000,500,200")
    args = parser.parse_args(argv)
    intervals = [int(i) for i in args.intervals_us.split(",")]
    rows = [(i, *measure(args.spinners, args.calls, i / 1_000_000)) for i in intervals]
    base = rows[0][2]
    print("| switch interval us | ms per 1 ms call | spin rate (first row = 1) |")
    print("| ---: | ---: | ---: |")
    for interval, per_call, rate in rows:
        print(f"| {interval} | {per_call:.2f} | {rate / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
