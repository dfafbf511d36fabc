"""Nexmark events like the ``nexmark`` crate's (0.2.0) ``--no-wait`` output, small and
deterministic, and each query's result computed directly from its definition (issue #42), for
the tests of examples/nexmark/q0.py ... q8.py.

An event is ``{"Person": {...}}``, ``{"Auction": {...}}`` or ``{"Bid": {...}}`` with the
crate's field names (its ``event.rs``): ids from 1000, categories 10 to 14, states of the
crate's six in lower case, prices in cents. Relationships as the crate makes them: an auction's
seller is a person already registered (often the latest: a "hot" seller); a bid is for the
hot auction of the latest ten, one of the last 20, one of the last 100 (the crate's in-flight
auctions) or, as the crate's ``auction_id_lead`` allows, one a few ids ahead that may come
later or never. Event times rise by ``STEP_MS`` an event; the order the
events are sent in is shuffled within ``DISORDER_MS`` (each event delayed by less than that),
so a source with that out-of-orderness never finds one late.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from typing import Any

Event = dict[str, dict[str, Any]]
Row = dict[str, Any]

BASE_MS = 1_700_000_003_000  # not on a 10 s boundary: the first window is partial
STEP_MS = 40
DISORDER_MS = 1000
STATES = ("az", "ca", "id", "or", "wa", "wy")
CITIES = ("phoenix", "los angeles", "boise", "portland", "bend", "seattle", "cheyenne")
NAMES = ("peter", "paul", "luke", "john", "vicky", "kate", "julie", "sarah", "walter")
CHANNELS = ("Google", "Facebook", "Baidu", "Apple", "channel-7")


class Generator:
    """Events one after the other, with the crate's proportions of kinds made coarser (1
    person : 3 auctions : 21 bids) so that a few hundred events hold every kind."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.persons: list[int] = []
        self.auctions: list[int] = []

    def event(self, at: int) -> Event:
        kind = self.rng.choices(("Person", "Auction", "Bid"), (1, 3, 21))[0]
        if not self.persons:
            kind = "Person"
        elif not self.auctions:
            kind = "Auction"
        if kind == "Person":
            return {"Person": self.person(at)}
        if kind == "Auction":
            return {"Auction": self.auction(at)}
        return {"Bid": self.bid(at)}

    def person(self, at: int) -> dict[str, Any]:
        rng, ident = self.rng, 1000 + len(self.persons)
        self.persons.append(ident)
        name = f"{rng.choice(NAMES)} {rng.choice(NAMES)}"
        card = " ".join(f"{rng.randrange(10_000):04}" for _ in range(4))
        return {
            "id": ident,
            "name": name,
            "email_address": f"{name.split()[0]}{ident}@example.com",
            "credit_card": card,
            "city": rng.choice(CITIES),
            "state": rng.choice(STATES),
            "date_time": at,
            "extra": "",
        }

    def auction(self, at: int) -> dict[str, Any]:
        rng, ident = self.rng, 1000 + len(self.auctions)
        self.auctions.append(ident)
        hot = rng.random() < 0.5
        initial = rng.randrange(100, 5000)
        return {
            "id": ident,
            "item_name": f"item-{ident}",
            "description": "an item",
            "initial_bid": initial,
            "reserve": initial + rng.randrange(100, 5000),
            "date_time": at,
            "expires": at + rng.randrange(1, 12_000),
            "seller": self.persons[-1] if hot else rng.choice(self.persons),
            "category": 10 + rng.randrange(5),
            "extra": "",
        }

    def bid(self, at: int) -> dict[str, Any]:
        rng, last = self.rng, self.auctions[-1]
        roll = rng.random()
        if roll < 0.4:
            auction = last - last % 10  # the hot auction of the latest ten
        elif roll < 0.75:
            auction = rng.choice(self.auctions[-20:])
        elif roll < 0.95:
            auction = rng.choice(self.auctions[-100:])  # the crate's in-flight auctions
        else:
            auction = last + rng.randrange(1, 4)  # ahead: may come later, or never
        channel = rng.choice(CHANNELS)
        return {
            "auction": auction,
            "bidder": rng.choice(self.persons),
            "price": rng.randrange(1, 400) * 25,  # coarse: equal prices happen
            "channel": channel,
            "url": f"https://www.nexmark.com/{channel.lower()}/item.htm?query=1",
            "date_time": at,
            "extra": "",
        }


def events(count: int, seed: int) -> list[Event]:
    """``count`` events in the order they are sent: event times rising by ``STEP_MS``, each
    delayed by less than ``DISORDER_MS``."""
    generator = Generator(seed)
    made = [generator.event(BASE_MS + i * STEP_MS) for i in range(count)]
    delay = random.Random(seed + 1)
    keyed = [(_time(e) + delay.randrange(DISORDER_MS), i, e) for i, e in enumerate(made)]
    return [e for _, _, e in sorted(keyed)]


def _time(event: Event) -> int:
    return int(next(iter(event.values()))["date_time"])


def of(kind: str, stream: list[Event]) -> list[dict[str, Any]]:
    """The ``kind`` events of ``stream`` (Person, Auction or Bid), in order."""
    return [e[kind] for e in stream if kind in e]


def canonical(rows: list[Row]) -> Counter[str]:
    """Rows as a multiset, independent of their order and of their keys' order."""
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


# -- each query, directly from its definition ----------------------------------------------


def q0(stream: list[Event]) -> list[Row]:
    return of("Bid", stream)


def q1(stream: list[Event]) -> list[Row]:
    fields = ("auction", "bidder", "date_time")
    return [{**{f: b[f] for f in fields}, "price": 0.908 * b["price"]} for b in of("Bid", stream)]


def q2(stream: list[Event]) -> list[Row]:
    bids = of("Bid", stream)
    return [{"auction": b["auction"], "price": b["price"]} for b in bids if b["auction"] % 123 == 0]


def q3(stream: list[Event]) -> list[Row]:
    persons = {p["id"]: p for p in of("Person", stream) if p["state"] in ("or", "id", "ca")}
    return [
        {k: persons[a["seller"]][k] for k in ("name", "city", "state")} | {"id": a["id"]}
        for a in of("Auction", stream)
        if a["category"] == 10 and a["seller"] in persons
    ]


def final_prices(stream: list[Event]) -> dict[int, int]:
    """Per auction id, its highest bid with ``date_time`` in ``[date_time, expires]`` (an
    auction without one has none)."""
    auctions = {a["id"]: a for a in of("Auction", stream)}
    final: dict[int, int] = {}
    for bid in of("Bid", stream):
        auction = auctions.get(bid["auction"])
        if auction and auction["date_time"] <= bid["date_time"] <= auction["expires"]:
            final[auction["id"]] = max(final.get(auction["id"], 0), bid["price"])
    return final


def q4(stream: list[Event]) -> dict[str, Row]:
    """The last value per key (the category as the sink writes it)."""
    category = {a["id"]: a["category"] for a in of("Auction", stream)}
    prices: dict[int, list[int]] = defaultdict(list)
    for auction, price in final_prices(stream).items():
        prices[category[auction]].append(price)
    return {
        str(c): {"category": c, "avg_price": sum(p) / len(p)} for c, p in sorted(prices.items())
    }


def q5(stream: list[Event]) -> list[Row]:
    counts: Counter[tuple[int, int]] = Counter()
    for bid in of("Bid", stream):
        at = bid["date_time"]
        for start in range(at - at % 2000, at - 10_000, -2000):
            counts[start, bid["auction"]] += 1
    top: dict[int, int] = defaultdict(int)
    for (start, _), n in counts.items():
        top[start] = max(top[start], n)
    return [
        {"auction": a, "count": n, "window_start": s, "window_end": s + 10_000}
        for (s, a), n in counts.items()
        if n == top[s]
    ]


def q6(stream: list[Event]) -> dict[str, Row]:
    """The last value per key (the seller as the sink writes it)."""
    auctions = {a["id"]: a for a in of("Auction", stream)}
    closed: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for ident, price in final_prices(stream).items():
        auction = auctions[ident]
        closed[auction["seller"]].append((auction["expires"], ident, price))
    result = {}
    for seller, sold in closed.items():
        last = sorted(sold)[-10:]
        result[str(seller)] = {"seller": seller, "avg_price": sum(p for *_, p in last) / len(last)}
    return result


def q7(stream: list[Event]) -> list[Row]:
    bids = of("Bid", stream)
    top: dict[int, int] = defaultdict(int)
    for bid in bids:
        window = bid["date_time"] // 10_000
        top[window] = max(top[window], bid["price"])
    return [
        {k: b[k] for k in ("auction", "bidder", "price", "date_time")}
        | {"window_end": (b["date_time"] // 10_000 + 1) * 10_000}
        for b in bids
        if b["price"] == top[b["date_time"] // 10_000]
    ]


def q8(stream: list[Event]) -> list[Row]:
    sold = {(a["seller"], a["date_time"] // 10_000) for a in of("Auction", stream)}
    return [
        {"id": p["id"], "name": p["name"], "window_start": p["date_time"] // 10_000 * 10_000}
        for p in of("Person", stream)
        if (p["id"], p["date_time"] // 10_000) in sold
    ]
