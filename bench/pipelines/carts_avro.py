"""A user's per-record pipeline (issue #44's last target): shopping carts with record metadata,
a keyed ``process`` with event-time timers, and Avro out with keys and headers.

Input on ``events``: Kafka key the cart's user (text), value JSON
``{"type": "add" | "view" | "checkout", "item": "sku-<n>", "price": <cents>, "ts": <ms>}``,
a ``source`` header (``web``, ``ios``, ``android``). Per user, in event time:

- every ``add`` grows the cart and writes its running state (``event`` ``add``: items,
  total, the add's time) and arms a timer 30 s later;
- a ``checkout`` writes the cart (``event`` ``checkout``) and empties it;
- a cart 30 s of event time after its last add without a checkout is ``abandoned`` (a timer
  that finds no later one pending), at that time;
- a ``view`` reads the cart and writes nothing.

Output on ``output``: key the user, value an Avro ``Outcome`` (plain Avro, the schema known
to both sides), headers ``event`` and ``source`` (the header of the add that made the cart).
Every input record crosses the engine on its own: no combining. bench/user_pipeline.py runs
it against bench/peers/plain_carts_app.py, the same work in plain confluent-kafka code; its
``variant``s leave parts out (the state and timers; the shuffle too) to show what each costs.

The input (``generate``) is sessions of one user each, all of a session's events within 20 s,
so that every timer (30 s after an add) is later than all of its user's events and the output
does not depend on when a watermark passes: ``expected`` computes it from the input alone.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from processor import Pipeline
from processor.models.murmur2 import partition_of
from processor.serde import Avro

ABANDON_AFTER_MS = 30_000
OUT_OF_ORDERNESS_MS = 1000
SESSION_SPAN_MS = 20_000
SESSION_EVERY_MS = 5  # a new session starts every 5 ms of event time
JITTER_MS = 800  # how far a record may come before an earlier one (< OUT_OF_ORDERNESS_MS)
CLOSING_AFTER_MS = 60_000  # each partition's last record: past every timer
SOURCES = (b"web", b"ios", b"android")
VARIANTS = ("full", "partitioned", "shuffled", "stateless")
WHOLE = ("full", "partitioned")  # the variants that do all of the work

OUTCOME = {
    "type": "record",
    "name": "Outcome",
    "namespace": "bench.carts",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "event", "type": "string"},
        {"name": "items", "type": "int"},
        {"name": "total", "type": "long"},
        {"name": "at", "type": "long"},
        {"name": "source", "type": "string"},
    ],
}
FIELDS = [f["name"] for f in OUTCOME["fields"]]  # type: ignore[index]


def track(event: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """One record of a user: an add, a checkout or a view."""
    kind = event["type"]
    cart = state.get(None)
    if kind == "add":
        if cart is None:
            source = dict(state.headers).get("source") or b""
            cart = {"items": 0, "total": 0, "source": source.decode()}
        cart["items"] += 1
        cart["total"] += event["price"]
        state.set(cart)
        state.timers.set(state.timestamp + ABANDON_AFTER_MS)
        return [outcome(state.key, "add", cart, state.timestamp)]
    if kind == "checkout" and cart is not None:
        state.delete()
        state.timers.clear()
        return [outcome(state.key, "checkout", cart, state.timestamp)]
    return []


def expired(at_ms: int, state: Any) -> list[dict[str, Any]]:
    """A cart's timer: abandoned, unless a later add armed a later timer."""
    cart = state.get(None)
    if cart is None or state.timers.pending():
        return []
    state.delete()
    return [outcome(state.key, "abandoned", cart, at_ms)]


def outcome(user: str, event: str, cart: dict[str, Any], at: int) -> dict[str, Any]:
    return {
        "user": user,
        "event": event,
        "items": cart["items"],
        "total": cart["total"],
        "at": at,
        "source": cart["source"],
    }


def headers(_key: Any, value: dict[str, Any]) -> list[tuple[str, bytes]]:
    return [("event", value["event"].encode()), ("source", value["source"].encode())]


def added(event: dict[str, Any], meta: Any) -> dict[str, Any]:
    """The variants' output of an add: the add alone, as if its cart were new."""
    source = dict(meta.headers).get("source") or b""
    cart = {"items": 1, "total": event["price"], "source": source.decode()}
    return outcome(meta.key, "add", cart, event["ts"])


def build(events: str = "carts", output: str = "carts-out", variant: str = "full") -> Pipeline:
    """The pipeline over the given topics. ``variant``: ``full`` (the pipeline),
    ``partitioned`` (the same over `Pipeline.keyed_source`: no shuffle, the topic being
    partitioned by user), or, to see what its parts cost, ``shuffled`` (each add through the
    same ``key_by``, then written as `added`: no state, no timers) or ``stateless`` (`added`
    at the source: no shuffle)."""
    p = Pipeline()
    read = p.keyed_source if variant == "partitioned" else p.source
    source: Any = read(
        events,
        key="text",
        value="json",
        timestamp=lambda e: e["ts"],
        out_of_orderness_ms=OUT_OF_ORDERNESS_MS,
    )
    avro = Avro(OUTCOME)
    if variant == "partitioned":
        outcomes = source.process(track, on_timer=expired)
    elif variant == "stateless":
        outcomes = source.filter(lambda e: e["type"] == "add").map(added, meta=True)
    elif variant == "shuffled":
        keyed = source.key_by(lambda _e, meta: meta.key, meta=True)
        outcomes = keyed.filter(lambda e: e["type"] == "add").map(added, meta=True)
    else:
        keyed = source.key_by(lambda _e, meta: meta.key, meta=True)
        outcomes = keyed.process(track, on_timer=expired)
    outcomes.sink(output, key=lambda _k, v: v["user"], value=avro, headers=headers)
    return p


# ---------------------------------------------------------------------------- the input

Record = tuple[int, bytes, bytes, bytes, int]  # partition, key, value, source header, ts


def _session(rng: random.Random, index: int) -> list[tuple[int, dict[str, Any]]]:
    """One user's events: 1-6 adds, 0-4 views in between, a checkout last 6 times in 10."""
    start = index * SESSION_EVERY_MS
    kinds = ["add"] * rng.randint(1, 6) + ["view"] * rng.randint(0, 4)
    rng.shuffle(kinds)
    if rng.random() < 0.6:
        kinds.append("checkout")
    times = sorted(start + rng.randrange(SESSION_SPAN_MS) for _ in kinds)
    return [
        (t, {"type": k, "item": f"sku-{rng.randrange(5000)}", "price": rng.randint(100, 20_000)})
        for t, k in zip(times, kinds, strict=True)
    ]


def generate(events: int, partitions: int, seed: int = 7) -> list[list[Record]]:
    """At least ``events`` records (whole sessions) and a closing record per partition, per
    partition in the order they are written: by event time plus up to JITTER_MS, so a
    record may come before an earlier one but is never late. Each in its key's partition, as
    Java's producers place it (murmur2), which ``partitioned`` needs."""
    rng = random.Random(seed)
    placed: list[list[tuple[float, Record]]] = [[] for _ in range(partitions)]
    made, index, last = 0, 0, 0
    while made < events:
        user = f"u{index}".encode()
        part = partition_of(user, partitions)
        source = SOURCES[index % len(SOURCES)]
        for ts, value in _session(rng, index):
            value["ts"] = ts
            record = (part, user, json.dumps(value).encode(), source, ts)
            placed[part].append((ts + rng.uniform(0, JITTER_MS), record))
            last = max(last, ts)
            made += 1
        index += 1
    out = []
    for part, rows in enumerate(placed):
        rows.sort(key=lambda row: row[0])
        ts = last + CLOSING_AFTER_MS
        closing = json.dumps({"type": "view", "item": "", "price": 0, "ts": ts}).encode()
        last_record = (part, _closing_key(part, partitions), closing, b"", ts)
        out.append([r for _, r in rows] + [last_record])
    return out


def _closing_key(part: int, partitions: int) -> bytes:
    """A key of partition ``part`` for its closing record."""
    n = 0
    while partition_of(b"closing-%d-%d" % (part, n), partitions) != part:
        n += 1
    return b"closing-%d-%d" % (part, n)


def expected(partitions: list[list[Record]], variant: str = "full") -> Counter[tuple[Any, ...]]:
    """The output as a multiset of (key, Outcome's values, headers), from the input alone."""
    got: Counter[tuple[Any, ...]] = Counter()
    if variant not in WHOLE:
        for _, key, raw, source, ts in (r for records in partitions for r in records):
            event = json.loads(raw)
            if event["type"] == "add":
                one = {"items": 1, "total": event["price"], "source": source.decode()}
                got[row(outcome(key.decode(), "add", one, ts))] += 1
        return got
    for records in partitions:
        carts: dict[str, dict[str, Any]] = {}
        for _, key, raw, source, ts in records:
            event, user = json.loads(raw), key.decode()
            cart = carts.get(user)
            if event["type"] == "add":
                if cart is None:
                    cart = carts[user] = {"items": 0, "total": 0, "source": source.decode()}
                    cart["last"] = 0
                cart["items"] += 1
                cart["total"] += event["price"]
                cart["last"] = max(cart["last"], ts)
                got[row(outcome(user, "add", cart, ts))] += 1
            elif event["type"] == "checkout" and cart is not None:
                del carts[user]
                got[row(outcome(user, "checkout", cart, ts))] += 1
        for user, cart in carts.items():
            got[row(outcome(user, "abandoned", cart, cart["last"] + ABANDON_AFTER_MS))] += 1
    return got


def row(value: dict[str, Any]) -> tuple[Any, ...]:
    """An outcome as the output reader sees it: key, the values, the headers."""
    heads = tuple(sorted((k, v.decode()) for k, v in headers(None, value)))
    return (value["user"], tuple(value[f] for f in FIELDS), heads)


def rows_of(
    records: Iterator[tuple[bytes | None, bytes | None, dict[str, bytes]]],
) -> Counter[tuple[Any, ...]]:
    """The output topic's records (key, Avro value, headers) as ``row``s."""
    import io

    import fastavro

    parsed = fastavro.parse_schema(OUTCOME)
    got: Counter[tuple[Any, ...]] = Counter()
    for key, value, heads in records:
        decoded: Any = fastavro.schemaless_reader(io.BytesIO(value or b""), parsed)
        shown = tuple(sorted((k, v.decode()) for k, v in heads.items()))
        got[((key or b"").decode(), tuple(decoded[f] for f in FIELDS), shown)] += 1
    return got
