"""Hostile Avro (issue #41, item 1): every record, under any writer schema the registry hands
out, is a value or a dead record in bounded time, and never a dead worker.

The hostile records are decoded in a child process (``_decode``): without the bounds, the
deep one kills its process with SIGSEGV and the count bomb never ends, which must fail the
test and not take pytest down or hang it. The registry is the local stand-in of its REST API
(tests/unit/test_serde.py) run by confluent-kafka's own client; tests/integration/
test_sinks.py feeds the same records through a real registry and broker."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from processor import PipelineError
from processor.serde import Avro
from processor.serde.avro_bounds import (
    MAX_AVRO_DEPTH,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_NESTING,
    MAX_VALUES,
    Plan,
)
from processor.serde.codec import RecordError, decode
from tests.registry_stand_in import StandInRegistry, serve_stand_in

CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}],
}
# A linked list: legal Avro, and as deep as its data.
NODE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}],
}
# The pipeline's flat Click as a writer may register it: one more field, a recursive one,
# which fastavro walks to skip it.
RECURSIVE_CLICK = {**CLICK, "fields": [*CLICK["fields"], {"name": "tail", "type": NODE}]}
TREE = {
    "type": "record",
    "name": "Tree",
    "fields": [
        {"name": "v", "type": "long"},
        {"name": "kids", "type": {"type": "array", "items": "Tree"}},
    ],
}
NULLS = {"type": "array", "items": "null"}
EMPTY = {"type": "record", "name": "Empty", "fields": []}


def zigzag(n: int) -> bytes:
    """``n`` as an Avro long (zig-zag varint)."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def linked(depth: int) -> bytes:
    """A NODE list ``depth`` records long: each value 1, then the next one (union branch 1)."""
    return (zigzag(1) + zigzag(1)) * (depth - 1) + zigzag(1) + zigzag(0)


def click(page: str = "a", n: int = 3) -> bytes:
    return zigzag(len(page)) + page.encode() + zigzag(n)


def wire(schema_id: int, body: bytes) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + body


_CHILD = """
import json, sys
from processor.serde import Avro
from processor.serde.codec import RecordError, decode, shown
url, raw, schema = sys.argv[1] or None, bytes.fromhex(sys.argv[2]), json.load(sys.stdin)
avro = Avro(schema, registry_url=url, registry_config={"max.retries": 0}).for_topic("t")
try:
    print("value", shown(decode(avro, raw), 60))
except RecordError as exc:
    print("dead", exc.reason, exc)
"""


def _decode(schema: Any, raw: bytes, url: str = "", timeout: float = 60) -> str:
    """What a child process makes of ``raw`` with ``Avro(schema, url)``: "value ..." or
    "dead <reason> <error>"; the test fails if the child dies or runs out of time."""
    args = [sys.executable, "-c", _CHILD, url, raw.hex()]
    try:
        done = subprocess.run(
            args, input=json.dumps(schema), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"decoding {len(raw)} bytes took more than {timeout} s")
    assert done.returncode == 0, f"the decoding process died ({done.returncode}): {done.stderr}"
    return done.stdout.strip()


@pytest.fixture
def registry() -> Iterator[str]:
    """The stand-in registry (tests/registry_stand_in.py), with ids 1.. set by each test."""
    with serve_stand_in() as url:
        yield url


# -- plain Avro ------------------------------------------------------------------------------


def test_recursive_data_10000_deep_is_a_dead_record_not_a_crash() -> None:
    raw = linked(10_000)
    assert len(raw) < 21_000
    assert _decode(NODE, raw).startswith("dead too_deep Avro: nested deeper than 200")


def test_an_item_count_bomb_is_dead_at_once() -> None:
    bombs: dict[str, list[Any]] = {
        "dead too_large": [NULLS, {"type": "array", "items": EMPTY}],
        # A map's entries take a byte at least (their key): fastavro runs out of bytes.
        "dead serde_error": [{"type": "map", "values": "null"}],
    }
    raw = zigzag(1 << 60) + zigzag(0)  # 2^60 items of zero bytes, in 10 bytes
    for dead, schemas in bombs.items():
        for schema in schemas:
            started = time.monotonic()
            assert _decode(schema, raw, timeout=30).startswith(dead), schema
            assert time.monotonic() - started < 30


def leaves(count: int) -> bytes:
    """``count`` TREE leaves: each a value and no children, two bytes."""
    return (zigzag(7) + zigzag(0)) * count


def test_counts_are_held_to_the_bytes_left_and_the_value_budget() -> None:
    tree = Avro(TREE)
    assert tree.loads(zigzag(1) + zigzag(2) + leaves(2) + zigzag(0)) == {
        "v": 1,
        "kids": [{"v": 7, "kids": []}] * 2,
    }
    with pytest.raises(RecordError, match="a block of 6 items in 5 bytes") as info:
        decode(tree, zigzag(1) + zigzag(6) + leaves(2) + zigzag(0))
    assert info.value.reason == "too_large"
    nulls = Avro(NULLS)
    assert nulls.loads(zigzag(1000) + zigzag(0)) == [None] * 1000
    with pytest.raises(RecordError, match=f"more than {MAX_VALUES} values") as info:
        # Blocks within the budget one by one, over it together.
        decode(nulls, (zigzag(MAX_VALUES // 2) * 3) + zigzag(0))
    assert info.value.reason == "too_large"


def test_a_block_byte_size_must_be_its_items_size() -> None:
    tree = Avro(TREE)
    # A negative count is followed by the block's size in bytes.
    assert len(tree.loads(zigzag(1) + zigzag(-2) + zigzag(4) + leaves(2) + zigzag(0))["kids"]) == 2
    with pytest.raises(RecordError, match="byte size"):
        decode(tree, zigzag(1) + zigzag(-2) + zigzag(5) + leaves(2) + zigzag(0))


def test_counts_of_items_of_a_byte_or_more_fail_fast_unscanned() -> None:
    # Not recursive, and every item takes a byte: fastavro stops at the end of the bytes.
    longs = {"type": "array", "items": "long"}
    assert not Plan(longs).scans(100)
    assert _decode(longs, zigzag(1 << 60) + zigzag(1) * 3, timeout=30).startswith(
        "dead serde_error Avro cannot decode it: EOFError"
    )


def test_data_as_deep_as_the_bound_decodes_in_a_thread() -> None:
    # Tasks run in threads: the deepest record the bound lets through decodes in one.
    avro = Avro(NODE)
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(avro.loads(linked(MAX_AVRO_DEPTH))))
    thread.start()
    thread.join()
    depth, value = 0, got[0]
    while value is not None:
        depth, value = depth + 1, value["next"]
    assert depth == MAX_AVRO_DEPTH
    with pytest.raises(RecordError, match="nested deeper"):
        decode(avro, linked(MAX_AVRO_DEPTH + 1))


def test_a_schema_of_reused_types_that_multiply_is_scanned() -> None:
    # D_i has two fields of D_(i-1): a few lines of schema, 2^25 nulls in zero bytes.
    schema: Any = {"type": "record", "name": "D0", "fields": [{"name": "a", "type": "null"}]}
    for i in range(1, 26):
        fields = [{"name": "x", "type": schema}, {"name": "y", "type": f"D{i - 1}"}]
        schema = {"type": "record", "name": f"D{i}", "fields": fields}
    assert _decode(schema, b"", timeout=30).startswith("dead too_large")


def test_a_chain_of_named_types_is_as_deep_as_its_data() -> None:
    # No recursion and JSON nested 4 levels, but T1499 holds T1498 ... holds T0: every
    # record is 1,500 levels deep (fastavro takes 3 s to decode one, recursively).
    types: list[dict[str, Any]] = [{"type": "record", "name": "T0", "fields": []}]
    for i in range(1, 1500):
        inner = [{"name": "x", "type": f"T{i - 1}"}]
        types.append({"type": "record", "name": f"T{i}", "fields": inner})
    fields = [{"name": f"t{i}", "type": t} for i, t in enumerate(types)]
    chain = {"type": "record", "name": "Chain", "fields": fields}
    assert Plan(chain).scans(0)
    assert _decode(chain, b"").startswith("dead too_deep")


def test_which_records_are_scanned() -> None:
    # Flat schemas never: their records cost nothing more.
    assert not Plan(CLICK).scans(1 << 30) and not Plan({"type": "long"}).scans(1 << 30)
    assert Avro(CLICK).loads(click()) == {"page": "a", "n": 3}
    # Recursion, or items that may take no byte: always.
    for schema in (NODE, TREE, NULLS, {"type": "array", "items": EMPTY}):
        assert Plan(schema).scans(1), schema
    # Items of a byte or more: only a record large enough to hold more values than the
    # budget, if each of its bytes were an item of the most values (a map entry's key too).
    strings = Plan({"type": "map", "values": {"type": "array", "items": "string"}})
    assert not strings.scans(MAX_VALUES // 2 - 1) and strings.scans(MAX_VALUES // 2)
    assert not Plan({"type": "array", "items": CLICK}).scans(MAX_VALUES // 3)
    assert Plan({"type": "array", "items": CLICK}).scans(MAX_VALUES // 3 + 1)


def test_the_pipelines_own_schema_is_held_to_the_schema_bounds() -> None:
    with pytest.raises(PipelineError, match="characters, over"):
        Avro({**CLICK, "doc": "x" * MAX_SCHEMA_BYTES})
    with pytest.raises(PipelineError, match="nests JSON deeper"):
        Avro(_nested_schema(MAX_SCHEMA_NESTING))


def _nested_schema(levels: int) -> dict[str, Any]:
    """A record in a record ... about ``levels`` JSON levels deep (three per record)."""
    schema: dict[str, Any] = {"type": "record", "name": "R0", "fields": []}
    for i in range(1, levels // 3 + 2):
        schema = {"type": "record", "name": f"R{i}", "fields": [{"name": "r", "type": schema}]}
    return schema


# -- writer schemas from the registry --------------------------------------------------------


def test_a_recursive_writer_schema_through_the_registry_is_a_dead_record(registry: str) -> None:
    StandInRegistry.schemas = {1: json.dumps(RECURSIVE_CLICK)}
    good = wire(1, click() + linked(3))
    assert _decode(CLICK, good, registry) == "value {'page': 'a', 'n': 3}"
    deep = wire(1, click() + linked(10_000))
    assert _decode(CLICK, deep, registry).startswith("dead too_deep")


def test_an_item_count_bomb_through_the_registry_is_a_dead_record(registry: str) -> None:
    writer = {**CLICK, "fields": [*CLICK["fields"], {"name": "x", "type": NULLS}]}
    StandInRegistry.schemas = {1: json.dumps(writer)}
    raw = wire(1, click() + zigzag(1 << 60) + zigzag(0))
    assert _decode(CLICK, raw, registry, timeout=30).startswith("dead too_large")


def test_writer_schemas_a_source_refuses(registry: str) -> None:
    big = {**CLICK, "doc": "x" * MAX_SCHEMA_BYTES}
    StandInRegistry.schemas = {
        1: json.dumps(big),  # oversized
        2: json.dumps(_nested_schema(300)),  # nested too deeply
        3: json.dumps({**CLICK, "name": "Other"}),  # another type
        4: '"long"',  # not the record at all
        5: json.dumps({"type": "record", "name": "Click", "fields": [{"name": "a"}]}),
        6: json.dumps({**CLICK, "aliases": ["Old"], "name": "New"}),
    }
    avro = Avro({**CLICK, "aliases": ["New"]}, registry_url=registry).for_topic("t")
    refused = {
        1: "characters, over",
        2: "nests JSON deeper",
        3: "'Other' is not",
        4: "None is not",
        5: "not an Avro schema",
    }
    for schema_id, error in refused.items():
        with pytest.raises(RecordError, match=error) as info:
            decode(avro, wire(schema_id, click()))
        assert info.value.reason == "schema_refused"
    assert avro.loads(wire(6, click())) == {"page": "a", "n": 3}  # an alias of the reader
    # Each writer schema is fetched once, refused or not.
    fetched = [c for c in StandInRegistry.calls if c.startswith("GET /schemas/ids/")]
    assert len(fetched) == len(set(fetched)) == 6, fetched
