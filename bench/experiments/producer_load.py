"""What the bench's rate producer alone costs the broker, by ``linger.ms``.

Every latency run has `bench.harness.measure.RateProducer` beside the system under test on the same
2 cores; the broker's CPU for the producer's requests is CPU no system gets. This runs the
producer alone at ``--rate`` on a broker of its own, once per linger, and prints the broker's
CPU (from /proc, over ``--seconds`` after a few seconds of warm-up).

    python bench/experiments/producer_load.py [--rate 300000] [--lingers 1,5,20] [--port 29492]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import measure
from processor.commands import corpus
from processor.localkafka.broker import LocalBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=300_000, help="words/s")
    parser.add_argument("--lingers", default="1,5,20", help="linger.ms values, in this order")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=29492)
    args = parser.parse_args(argv)
    warmup = 8.0
    with tempfile.TemporaryDirectory(prefix="producer-load-") as tmp:
        data_dir = Path(tmp) / "kafka"
        broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=data_dir)
        broker.start()
        try:
            pid = int(broker.pid_file.read_text().strip())
            for linger in (int(v) for v in args.lingers.split(",")):
                topic = f"load-linger-{linger}"
                measure.create_topic(broker.bootstrap, topic, 4)
                lines = list(corpus.lines(int(args.rate * (warmup + args.seconds + 2)), seed=3))
                # The producer process is spawned: it reads LINGER_MS when it imports
                # bench.harness.measure, so the value goes in through the environment of the spawn.
                with mock.patch.dict(os.environ, {"BENCH_PRODUCER_LINGER_MS": str(linger)}):
                    producer = measure.RateProducer(broker.bootstrap, topic, lines, args.rate, 4)
                    producer.start()
                time.sleep(warmup)
                before, started = measure.process_cpu_s(pid), time.monotonic()
                time.sleep(args.seconds)
                cores = (measure.process_cpu_s(pid) - before) / (time.monotonic() - started)
                producer.join(120)
                print(
                    f"linger.ms {linger}: the broker used {cores:.2f} cores at "
                    f"{args.rate:,} words/s (the producer at most "
                    f"{producer.max_behind_s:.3f} s behind)",
                    flush=True,
                )
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
