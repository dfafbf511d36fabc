"""A count per Kafka key over a keyed source partitioned by murmur2 (Java's partitioner),
for tests/integration/test_keyed_source.py."""

from processor import Pipeline


def build(words: str, counts: str) -> Pipeline:
    p = Pipeline()
    p.keyed_source(words, key="text", partitioner="murmur2").count(name="per_key").sink(counts)
    return p
