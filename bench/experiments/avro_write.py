"""What writing one Avro record costs: fastavro's `schemaless_writer` against `Avro.dumps`
(processor/serde/avro_writer.py's compiled writer), and confluent-kafka's `AvroSerializer`
against `Avro(registry_url=...).dumps`; and reading one: its `AvroDeserializer` against
`Avro(registry_url=...).loads` (which reads a writer schema without rules itself). For the
user pipeline's six-field ``Outcome`` (bench/pipelines/carts_avro.py). No broker; the
registry is the local stand-in of its REST API that tests/unit/test_serde.py runs
(tests/registry_stand_in.py); each side registers once, before the timing.

    python bench/experiments/avro_write.py [--records 5000] [--repeat 15]

Prints the best of ``--repeat`` passes over ``--records`` records, in µs a record.
"""

from __future__ import annotations

import argparse
import io
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fastavro  # noqa: E402
from confluent_kafka.schema_registry import (  # noqa: E402
    SchemaRegistryClient,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from bench.pipelines import carts_avro  # noqa: E402
from processor.serde import Avro  # noqa: E402
from tests.registry_stand_in import serve_stand_in  # noqa: E402


def _best(fn: Callable[[], Any], records: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat)) / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    values = [
        {"user": f"u{i}", "event": "add", "items": i % 7, "total": 1234 * i,
         "at": 1796628768695 + i, "source": "web"}
        for i in range(args.records)
    ]  # fmt: skip
    parsed = fastavro.parse_schema(carts_avro.OUTCOME)
    plain = Avro(carts_avro.OUTCOME)

    def fastavro_all() -> None:
        for v in values:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, v)
            out.getvalue()

    with serve_stand_in() as url:
        theirs = AvroSerializer(
            SchemaRegistryClient({"url": url}),
            plain.schema_str,
            conf={"subject.name.strategy": topic_subject_name_strategy},
        )
        ctx = SerializationContext("out", MessageField.VALUE)
        ours = Avro(carts_avro.OUTCOME, registry_url=url).for_topic("out")
        assert ours.dumps(values[0]) == theirs(values[0], ctx)  # both registered
        raws = [ours.dumps(v) for v in values]
        client = SchemaRegistryClient({"url": url})
        conf = {"subject.name.strategy": topic_subject_name_strategy}
        their_reader = AvroDeserializer(client, plain.schema_str, conf=conf)
        our_reader = Avro(carts_avro.OUTCOME, registry_url=url).for_topic("out")
        assert [our_reader.loads(r) for r in raws] == [their_reader(r, ctx) for r in raws]
        rows = {
            "fastavro schemaless_writer": fastavro_all,
            "Avro.dumps": lambda: [plain.dumps(v) for v in values],
            "confluent-kafka AvroSerializer": lambda: [theirs(v, ctx) for v in values],
            "Avro(registry_url=...).dumps": lambda: [ours.dumps(v) for v in values],
            "confluent-kafka AvroDeserializer": lambda: [their_reader(r, ctx) for r in raws],
            "Avro(registry_url=...).loads": lambda: [our_reader.loads(r) for r in raws],
        }
        for name, fn in rows.items():
            print(f"{name:32} {_best(fn, args.records, args.repeat):6.2f} us a record")


if __name__ == "__main__":
    main()
