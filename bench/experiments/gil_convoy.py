"""The GIL's convoy effect in a worker, and what a shorter switch interval does to it.

A worker runs every task of its share in one interpreter: source tasks that tokenize (CPU,
GIL held) beside tasks on a checkpoint's path that make many short calls which release the GIL
(a commit's round trip, a RocksDB flush waited for, a fetch). Each such call ends with the
thread waiting for the GIL again, and a CPU-bound thread gives it up only when its switch
interval has run out: Python's default is 5 ms, per call. This measures it without a broker:
``--spinners`` threads count in a loop (the CPU-bound tasks) while one thread makes
``--calls`` calls of ``time.sleep(0.001)`` (1 ms without the GIL), per switch interval, and
reports the caller's wall time per call (1.0 ms would be no convoy). bench/README has why the
workers keep Python's interval all the same (a shorter one was worse end to end).

    python bench/experiments/gil_convoy.py [--spinners 3] [--calls 200] \\
        [--intervals-us 5000,1000,500,200]

Prints one row per interval; no broker needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.experiments.gil_checkpoint import SpinCounter


def measure(spinners: int, calls: int, interval_s: float) -> float:
    """Wall ms per 1 ms GIL-free call beside ``spinners`` CPU-bound threads."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    threads = [SpinCounter() for _ in range(spinners)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.05)
        started = time.perf_counter()
        for _ in range(calls):
            time.sleep(0.001)
        took = time.perf_counter() - started
    finally:
        for t in threads:
            t.stopped = True
        for t in threads:
            t.join()
        sys.setswitchinterval(previous)
    return took * 1000 / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spinners", type=int, default=3, help="CPU-bound threads")
    parser.add_argument("--calls", type=int, default=200, help="1 ms GIL-free calls")
    parser.add_argument("--intervals-us", default="5000,1000,500,200")
    args = parser.parse_args(argv)
    intervals = [int(i) for i in args.intervals_us.split(",")]
    print("| switch interval us | ms per 1 ms call |")
    print("| ---: | ---: |")
    for interval in intervals:
        print(f"| {interval} | {measure(args.spinners, args.calls, interval / 1_000_000):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
