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

How it maps:

- ``auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN ...`` and the inner
  ``MAX(B.price) ... GROUP BY A.id``: a ``process`` keyed by auction id (both event types
  tagged in one ``flat_map``) that buffers the bids which arrive before their auction and
  keeps the highest bid in the auction's time; it emits the auction's final price so far,
  ``{category, price}``, each time it rises: a table of one row per auction, updated. Not
  ``join(within_ms=None)``, which would keep every bid for good: an event-time timer at
  ``expires`` deletes the auction once no bid can change its price (a timer fires once the
  watermark is above its time, after every bid at ``expires``); a buffered bid is dropped
  once the watermark passes it, as its auction (which starts no later than the bid) can no
  longer come, and a bid after ``expires`` finds no auction and is dropped the same way.
- ``SELECT Q.category, AVG(Q.final) ... GROUP BY Q.category``: ``regroup`` of that table by
  category with ``Aggregator.avg``: when an auction's price rises, its old price is taken
  back from the category's average and the new one added (Flink SQL's retraction), per
  checkpoint; the map puts the category (the group's key) into the row.
"""

from processor import Aggregator, Pipeline

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
    """``auction``'s final price so far after ``bids`` ([date_time, price]), if it rose."""
    start, expires, category = auction["auction"]
    prices = [price for at, price in bids if start <= at <= expires]
    if auction["max"] is not None:
        prices.append(auction["max"])
    new = max(prices, default=None)
    if new is None or new == auction["max"]:
        return []
    auction["max"] = new
    return [{"category": category, "price": new}]


def final_prices(side, state):
    """Per auction: ``{"auction": [start, expires, category] | None, "max": ..., "waiting":
    [bids before their auction]}``; emits its final price so far as it rises."""
    seen = state.get({"auction": None, "max": None, "waiting": []})
    if "auction" in side:
        seen["auction"] = side["auction"]
        out = raise_price(seen, seen["waiting"])
        seen["waiting"] = []
        state.timers.set(side["auction"][1])
    elif seen["auction"] is not None:
        out = raise_price(seen, [side["bid"]])
    else:
        seen["waiting"].append(side["bid"])
        state.timers.set(side["bid"][0])
        out = []
    state.set(seen)
    return out


def expire(at_ms, state):
    """An auction closed (the watermark passed ``expires``), or bids waited for it in vain."""
    seen = state.get()
    if seen is None:
        return []
    if seen["auction"] is not None:
        if at_ms >= seen["auction"][1]:
            state.delete()
        return []
    seen["waiting"] = [b for b in seen["waiting"] if b[0] > at_ms]
    if seen["waiting"]:
        state.set(seen)
    else:
        state.delete()
    return []


def build(events="nexmark", output="nexmark-q4", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    auctions = source.flat_map(sides).key_by(lambda s: s["id"])
    (
        auctions.process(final_prices, on_timer=expire)
        .regroup(lambda auction, final: final["category"], Aggregator.avg(lambda f: f["price"]))
        .map(lambda avg, meta: {"category": meta.key, "avg_price": avg}, meta=True)
        .sink(output)
    )
    return p


pipeline = build()
