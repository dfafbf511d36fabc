"""The EOS test's verifier: the input and every output read back by a plain read_committed
consumer of its own (no client or setting of the engine's), checked by `checks`, and no
transaction of the job left open. Prints one result line.

Open transactions, two ways, as Kafka's verifier and its tools see them:
- every output partition's last stable offset equals its high watermark
  (EosTestDriver.verifyAllTransactionFinished: read_committed end == read_uncommitted end);
- none of the job's transactional ids is Ongoing or Prepare* in the Admin API's
  listTransactions (what ``kafka-transactions.sh list`` shows).

``python -m tests.eos.verify --bootstrap B --prefix JOB`` checks a finished run's topics
(``JOB.data``, ``JOB.echo``...).
"""

from __future__ import annotations

import argparse
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from processor.localkafka.broker import LocalBroker
from processor.localkafka.brokertools import find_java
from tests.eos.checks import AGGREGATES, Record, Tally, check_aggregate, check_echo

OUTPUTS = ("echo", *AGGREGATES)
# States in which a transaction still holds back read_committed readers (or will write
# markers): anything but Empty, CompleteCommit, CompleteAbort and Dead.
OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}
LIST_TRANSACTIONS = Path(__file__).resolve().parent / "ListTransactions.java"


@dataclass
class Result:
    """What the verifier found; ``line`` is the one line it prints."""

    inputs: int
    tally: Tally
    open_transactions: list[str] = field(default_factory=list)
    unstable: list[str] = field(default_factory=list)  # partitions with LSO < high watermark

    @property
    def ok(self) -> bool:
        return self.tally.ok and not self.open_transactions and not self.unstable

    @property
    def line(self) -> str:
        t = self.tally
        verdict = "ALL-RECORDS-DELIVERED" if self.ok else "FAILED"
        return (
            f"EOS-VERIFY input={self.inputs} verified={t.verified} lost={t.lost} "
            f"duplicated={t.duplicated} wrong={t.wrong} "
            f"open_transactions={len(self.open_transactions)} "
            f"unstable_partitions={len(self.unstable)} {verdict}"
        )


def topics_of(prefix: str) -> dict[str, str]:
    """The run's topic of each role (``data`` and the outputs)."""
    return {role: f"{prefix}.{role}" for role in ("data", *OUTPUTS)}


def verify(bootstrap: str, prefix: str, settle_s: float = 60) -> Result:
    """Check the run whose topics start with ``prefix.`` and whose transactional ids with
    ``prefix.`` (the job's name). Waits up to ``settle_s`` for transactions to end first,
    as Kafka's verifier waits for the last stable offsets: one a killed task left open ends
    when the task's next producer starts (fenced) or after its transaction timeout."""
    topics = topics_of(prefix)
    outputs = [topics[role] for role in OUTPUTS]
    deadline = time.monotonic() + settle_s
    while True:
        unstable = unstable_partitions(bootstrap, outputs)
        still_open = open_transactions(bootstrap, f"{prefix}.")
        if (not unstable and not still_open) or time.monotonic() > deadline:
            break
        time.sleep(2)
    data = read_committed(bootstrap, topics["data"])
    tally = check_echo(data, read_committed(bootstrap, topics["echo"]))
    for kind in AGGREGATES:
        tally.add(check_aggregate(kind, data, read_committed(bootstrap, topics[kind])))
    inputs = sum(len(records) for records in data.values())
    return Result(inputs, tally, still_open, unstable)


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-verifier-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    assert metadata.error is None, f"{topic}: {metadata.error}"
    return sorted(metadata.partitions)


def unstable_partitions(bootstrap: str, topics: list[str]) -> list[str]:
    """``topic-p`` of every partition whose read_committed end (last stable offset) is
    below its read_uncommitted end (high watermark): a transaction there is still open."""
    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    try:
        out = []
        for topic in topics:
            for p in _partitions(committed, topic):
                tp = TopicPartition(topic, p)
                _, stable = committed.get_watermark_offsets(tp, timeout=10, cached=False)
                _, high = uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)
                if stable != high:
                    out.append(f"{topic}-{p}")
        return out
    finally:
        committed.close()
        uncommitted.close()


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    """``id state`` of each transaction whose id starts with ``prefix`` and is still open,
    as the brokers' transaction coordinators list them (Admin.listTransactions)."""
    libs = LocalBroker().fetch()
    done = subprocess.run(
        [find_java(), "-cp", f"{libs}/*", str(LIST_TRANSACTIONS), bootstrap],
        capture_output=True,
        text=True,
        # A JVM that compiles the file first: minutes on a machine loaded far past its cores.
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"listing transactions failed: {done.stderr[-2000:]}")
    out = []
    for line in done.stdout.splitlines():
        txn_id, _producer, state = line.split("\t")
        if txn_id.startswith(prefix) and state in OPEN_STATES:
            out.append(f"{txn_id} {state}")
    return out


def read_committed(bootstrap: str, topic: str, timeout: float = 120) -> dict[int, list[Record]]:
    """Every committed record of ``topic`` per partition, in log order, up to the end
    (the last stable offset) each partition has now."""
    consumer = _consumer(bootstrap, "read_committed")
    try:
        partitions = _partitions(consumer, topic)
        out: dict[int, list[Record]] = {p: [] for p in partitions}
        ends = {}
        for p in partitions:
            _, end = consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)
            if end > 0:
                ends[p] = end
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: partitions {sorted(ends)} not read to their end")
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    raise RuntimeError(f"{topic}: {msg.error()}")
                out[msg.partition() or 0].append((msg.key(), msg.value()))
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        return out
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Verify a finished run; print the result line (and examples of what is wrong)."""
    parser = argparse.ArgumentParser(prog="python -m tests.eos.verify")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True, help="the job's name: its topics' prefix")
    parser.add_argument("--settle", type=float, default=60, help="seconds for open txns to end")
    args = parser.parse_args(argv)
    result = verify(args.bootstrap, args.prefix, args.settle)
    report(result)
    return 0 if result.ok else 1


def report(result: Result) -> None:
    """The examples of what is wrong, then the result line."""
    for example in result.tally.examples:
        print(f"  {example}")
    for txn in result.open_transactions:
        print(f"  open transaction: {txn}")
    for partition in result.unstable:
        print(f"  open transaction in {partition} (last stable offset < high watermark)")
    print(result.line, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
