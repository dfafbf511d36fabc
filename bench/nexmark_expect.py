"""Each Nexmark query's expected output over a stream of events too large to hold (10 M
events of the crate: some 2.8 GB of JSON), computed in one pass: the definitions of
tests/nexmark_data.py, event by event. tests/unit/test_nexmark_bench.py checks that they
give what those definitions give.

What is kept, at most: per auction its times, category and seller (q4, q6: some 6 % of the
events are auctions); q3's persons of three states and auctions of category 10; q5's bid count
per (2 s slice, auction); q7's top bids per window; q8's persons and (seller, window) pairs; the
bids of an auction not seen yet (the crate's bids may name an auction a few ids ahead). The
row queries' rows go straight into `Rows` (a count and a digest beyond a few hundred
thousand), so q0's 9 M rows cost no memory.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from bench.nexmark_output import UPDATING_KEYS, Rows, _row, last_values, stream_records

Event = dict[str, dict[str, Any]]
Q3_STATES = ("or", "id", "ca")


class Expected:
    """Feed every event (`add`, in the topic's order), then `rows` per query."""

    def __init__(self, queries: Iterable[str]) -> None:
        self.queries = set(queries)
        self.events = 0
        self.stream_rows: dict[str, Rows] = {
            q: Rows() for q in ("q0", "q1", "q2") if q in self.queries
        }
        # Called with (query, row, bid) for each row of q0-q2 as it is made (the live phase's
        # latency finds a row's input event by it: bench/nexmark_latency.py).
        self.on_row: Callable[[str, str, dict[str, Any]], None] | None = None
        # q3
        self.persons3: dict[int, tuple[str, str, str]] = {}
        self.auctions3: list[tuple[int, int]] = []  # (seller, id) of category 10
        # q4, q6: id -> (date_time, expires, category, seller); the final price so far
        self.auctions: dict[int, tuple[int, int, int, int]] = {}
        self.final: dict[int, int] = {}
        self.pending: dict[int, list[tuple[int, int]]] = defaultdict(list)
        # q5: per 2 s slice (a window's step) the bids per auction; a window is 5 slices
        self.slices5: dict[int, Counter[int]] = defaultdict(Counter)
        # q7: window -> (top price, its bids' rows)
        self.top7: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        # q8
        self.sold8: set[tuple[int, int]] = set()
        self.persons8: list[tuple[int, str, int]] = []

    def add(self, event: Event) -> None:
        self.events += 1
        if "Bid" in event:
            self._bid(event["Bid"])
        elif "Auction" in event:
            self._auction(event["Auction"])
        elif "Person" in event:
            self._person(event["Person"])

    def _bid(self, bid: dict[str, Any]) -> None:
        if "q0" in self.stream_rows:
            self._stream("q0", _row(bid), bid)
        if "q1" in self.stream_rows:
            fields = ("auction", "bidder", "date_time")
            row = {**{f: bid[f] for f in fields}, "price": 0.908 * bid["price"]}
            self._stream("q1", _row(row), bid)
        if "q2" in self.stream_rows and bid["auction"] % 123 == 0:
            self._stream("q2", _row({"auction": bid["auction"], "price": bid["price"]}), bid)
        at = int(bid["date_time"])
        if self.queries & {"q4", "q6"}:
            auction = bid["auction"]
            if auction in self.auctions:
                self._final(auction, at, bid["price"])
            else:
                self.pending[auction].append((at, bid["price"]))
        if "q5" in self.queries:
            self.slices5[at - at % 2000][bid["auction"]] += 1
        if "q7" in self.queries:
            window, price = at // 10_000, bid["price"]
            top, rows = self.top7.get(window, (0, []))
            if price > top or window not in self.top7:
                top, rows = price, []
                self.top7[window] = (top, rows)
            if price == top:
                rows.append(
                    {k: bid[k] for k in ("auction", "bidder", "price", "date_time")}
                    | {"window_end": (window + 1) * 10_000}
                )

    def _stream(self, query: str, row: str, bid: dict[str, Any]) -> None:
        self.stream_rows[query].add(row)
        if self.on_row is not None:
            self.on_row(query, row, bid)

    def _final(self, auction: int, at: int, price: int) -> None:
        start, expires, *_ = self.auctions[auction]
        if start <= at <= expires:
            self.final[auction] = max(self.final.get(auction, 0), price)

    def _auction(self, auction: dict[str, Any]) -> None:
        ident, at = int(auction["id"]), int(auction["date_time"])
        if "q3" in self.queries and auction["category"] == 10:
            self.auctions3.append((int(auction["seller"]), ident))
        if self.queries & {"q4", "q6"}:
            self.auctions[ident] = (
                at,
                int(auction["expires"]),
                auction["category"],
                auction["seller"],
            )
            for bid_at, price in self.pending.pop(ident, []):
                self._final(ident, bid_at, price)
        if "q8" in self.queries:
            self.sold8.add((int(auction["seller"]), at // 10_000))

    def _person(self, person: dict[str, Any]) -> None:
        if "q3" in self.queries and person["state"] in Q3_STATES:
            self.persons3[int(person["id"])] = (person["name"], person["city"], person["state"])
        if "q8" in self.queries:
            at = int(person["date_time"])
            self.persons8.append((int(person["id"]), person["name"], at // 10_000))

    def rows(self, query: str) -> Rows:
        """The query's expected output over the events added so far."""
        if query in self.stream_rows:
            return self.stream_rows[query]
        if query in UPDATING_KEYS:
            return last_values(query, self._q4() if query == "q4" else self._q6())
        rows = Rows()
        for row in getattr(self, f"_{query}")():
            rows.add(_row(row))
        return rows

    def _q3(self) -> list[dict[str, Any]]:
        out = []
        for seller, ident in self.auctions3:
            if seller in self.persons3:
                name, city, state = self.persons3[seller]
                out.append({"name": name, "city": city, "state": state, "id": ident})
        return out

    def _q4(self) -> dict[str, dict[str, Any]]:
        prices: dict[int, list[int]] = defaultdict(list)
        for auction, price in self.final.items():
            prices[self.auctions[auction][2]].append(price)
        return {str(c): {"category": c, "avg_price": sum(p) / len(p)} for c, p in prices.items()}

    def _q6(self) -> dict[str, dict[str, Any]]:
        closed: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for ident, price in self.final.items():
            _, expires, _, seller = self.auctions[ident]
            closed[seller].append((expires, ident, price))
        out = {}
        for seller, sold in closed.items():
            last = sorted(sold)[-10:]
            out[str(seller)] = {"seller": seller, "avg_price": sum(p for *_, p in last) / len(last)}
        return out

    def _q5(self) -> list[dict[str, Any]]:
        """A bid at ``t`` is in the 5 windows starting at its slice ``t - t % 2000`` and the 4
        slices before: window ``w`` holds the slices ``w``, ``w + 2000`` ... ``w + 8000``. One
        window's counts at a time (a map of every window's would be 5 times the slices')."""
        out = []
        for start in sorted({s - 2000 * k for s in self.slices5 for k in range(5)}):
            counts: Counter[int] = Counter()
            for k in range(5):
                counts.update(self.slices5.get(start + 2000 * k, {}))
            top = max(counts.values())
            out += [
                {"auction": a, "count": n, "window_start": start, "window_end": start + 10_000}
                for a, n in counts.items()
                if n == top
            ]
        return out

    def _q7(self) -> list[dict[str, Any]]:
        return [row for _, rows in self.top7.values() for row in rows]

    def _q8(self) -> list[dict[str, Any]]:
        return [
            {"id": ident, "name": name, "window_start": window * 10_000}
            for ident, name, window in self.persons8
            if (ident, window) in self.sold8
        ]


def from_topic(bootstrap: str, topic: str, queries: Iterable[str]) -> Expected:
    """Every committed event of ``topic``, read back once and fed to an `Expected`."""
    expected = Expected(queries)
    for _, value in stream_records(bootstrap, topic, timeout=3600):
        if value is not None:
            expected.add(json.loads(value))
    return expected
