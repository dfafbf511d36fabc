"""Nexmark q4, average price per category: ``{category, avg_price}``, updated as it changes.

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL::

    SELECT Q.category, AVG(Q.final) AS avg_price
    FROM (SELECT MAX(B.price) AS final, A.category
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
          GROUP BY A.id, A.category) Q
    GROUP BY Q.category

An auction's final price is its highest bid between its ``date_time`` and its ``expires``
(both inclusive); an auction without such a bid has none and does not count.

Two API gaps of issue #42 shape it:

- no join that ends with one side's own time: ``join(within_ms=None)`` would meet every bid
  with its auction but keep both for good. Here the auction and its bids meet in a
  hand-written ``process`` keyed by auction id (both event types tagged in one ``flat_map``)
  that buffers the bids which arrive before their auction. An event-time timer at
  ``expires + 1`` (the close is inclusive) deletes the auction once no bid can change its
  price; a buffered bid is dropped once the watermark passes it, as its auction (which
  starts no later than the bid) can no longer come.
- no updating aggregation over an updating input: the inner ``MAX`` changes as bids come,
  and the outer ``AVG`` must take back the old maximum. The ``process`` emits each change of
  an auction's maximum as a delta ``{category, sum, n}`` (``sum`` = new - old maximum, ``n``
  = 1 for the auction's first price) that an ``aggregate(merge=)`` per category adds up.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def sides(event):
    if "Auction" in event:
        a = event["Auction"]
        return [{"auction": [a["date_time"], a["expires"], a["category"]], "id": a["id"]}]
    if "Bid" in event:
        b = event["Bid"]
        return [{"bid": [b["date_time"], b["price"]], "id": b["auction"]}]
    return []


def raise_price(auction, bids):
    """``auction``'s new maximum after ``bids`` ([date_time, price]); a delta if it rose."""
    start, expires, category = auction["auction"]
    old = auction["max"]
    prices = [price for at, price in bids if start <= at <= expires]
    if old is not None:
        prices.append(old)
    new = max(prices, default=None)
    if new is None or new == old:
        return []
    auction["max"] = new
    return [{"category": category, "sum": new - (old or 0), "n": 1 if old is None else 0}]


def final_prices(side, state):
    """Per auction: ``{"auction": [start, expires, category] | None, "max": ..., "waiting":
    [bids before their auction]}``; emits the deltas of its maximum."""
    seen = state.get({"auction": None, "max": None, "waiting": []})
    if "auction" in side:
        seen["auction"] = side["auction"]
        out = raise_price(seen, seen["waiting"])
        seen["waiting"] = []
        state.timers.set(side["auction"][1] + 1)
    elif seen["auction"] is not None:
        out = raise_price(seen, [side["bid"]])
    else:
        seen["waiting"].append(side["bid"])
        state.timers.set(side["bid"][0] + 1)
        out = []
    state.set(seen)
    return out


def expire(at_ms, state):
    """An auction closed (``expires`` passed), or bids waited for it in vain."""
    seen = state.get()
    if seen is None:
        return []
    if seen["auction"] is not None:
        if at_ms > seen["auction"][1]:
            state.delete()
        return []
    seen["waiting"] = [b for b in seen["waiting"] if b[0] >= at_ms]
    if seen["waiting"]:
        state.set(seen)
    else:
        state.delete()
    return []


def add(acc, delta):
    """A delta (or a partial sum, as ``merge``) into a category's running sum and count."""
    category = acc["category"] if delta["category"] is None else delta["category"]
    return {"category": category, "sum": acc["sum"] + delta["sum"], "n": acc["n"] + delta["n"]}


def build(events="nexmark", output="nexmark-q4", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.flat_map(sides)
        .key_by(lambda s: s["id"])
        .process(final_prices, on_timer=expire)
        .key_by(lambda d: d["category"])
        .aggregate({"category": None, "sum": 0, "n": 0}, add, merge=add)
        .filter(lambda acc: acc["n"] > 0)
        .map(lambda acc: {"category": acc["category"], "avg_price": acc["sum"] / acc["n"]})
        .sink(output)
    )
    return p


pipeline = build()
