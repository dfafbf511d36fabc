"""A loop that feeds back twice what it consumes, for the read-ahead bound's test: each record
goes round ``DEPTH`` times, doubling at each turn, and its leaves leave the loop.

Input records: ``{"id": "s7", "depth": 0, "pad": "..."}``. A seed of depth 0 makes 2^DEPTH
leaves, each record carrying the seed's pad (4 KiB), so a few hundred seeds put hundreds of
MiB round the loop at its widest turn.
"""

from typing import Any

from processor import Pipeline

DEPTH = 9


def seen(record: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """Each record once (a key per record: its place in the tree)."""
    state.set(record["depth"])
    return [record]


def children(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": f"{record['id']}.{i}", "depth": record["depth"] + 1, "pad": record["pad"]}
        for i in (0, 1)
    ]


def body(records: Any) -> tuple[Any, Any]:
    kept = records.process(seen, name="seen")
    again = kept.filter(lambda r: r["depth"] < DEPTH).flat_map(children)
    out = kept.filter(lambda r: r["depth"] == DEPTH).map(lambda r: {"id": r["id"]})
    return again.key_by(lambda r: r["id"], name="again"), out


def build(seeds: str = "seeds", leaves: str = "leaves") -> Pipeline:
    p = Pipeline()
    keyed = p.source(seeds, value="json").key_by(lambda r: r["id"], name="by-id")
    keyed.iterate(body, name="doubling").sink(leaves)
    return p
