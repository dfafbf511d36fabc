"""Nexmark q6, average selling price by seller: ``{seller, avg_price}`` over each seller's
last 10 closed auctions, updated as auctions close.

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL (as Nexmark states it; Flink SQL cannot run an OVER window on the updating ``Q``)::

    SELECT Q.seller, AVG(Q.final) OVER
           (PARTITION BY Q.seller ORDER BY Q.expires ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)
    FROM (SELECT MAX(B.price) AS final, A.seller, A.expires
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
          GROUP BY A.id, A.seller, A.expires) Q

An auction closes at ``expires``; its price is its final price as in q4 (its highest bid
between its ``date_time`` and ``expires``, both inclusive; none: it does not count). The
"last 10" are by ``expires``, ties broken by auction id, so that the result does not depend
on the order in which closes reach the seller's task.

The auction and its bids meet as in q4 (a ``process`` per auction id that buffers bids that
come before their auction; ``join(within_ms=None)`` would keep every bid for good), but the
price is emitted once, when the auction closes: an event-time timer at ``expires``. The close
is inclusive, and a timer at ``expires`` is what makes it so: a timer fires once the watermark
is above its time, so every bid at ``expires`` has come by then (a bid behind the watermark
is late for a window too). The auction's state is deleted when it closes; a bid that comes
later (after ``expires``) finds no auction, waits as a bid before its auction would, and is
dropped when the watermark passes it, as no auction can come for it any more. Per seller,
an ``aggregate(merge=)`` keeps the 10 latest.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
LAST = 10


def event_time(event):
    return next(iter(event.values()))["date_time"]


def sides(event):
    if "Auction" in event:
        a = event["Auction"]
        return [{"auction": [a["date_time"], a["expires"], a["seller"]], "id": a["id"]}]
    if "Bid" in event:
        b = event["Bid"]
        return [{"bid": [b["date_time"], b["price"]], "id": b["auction"]}]
    return []


def best(auction, bids, high):
    start, expires, _ = auction
    return max([p for at, p in bids if start <= at <= expires] + [high], default=None)


def track(side, state):
    """Per auction: ``{"auction": [start, expires, seller] | None, "max": ..., "waiting":
    [bids before their auction]}``; nothing out until the auction closes."""
    seen = state.get({"auction": None, "max": 0, "waiting": []})
    if "auction" in side:
        seen["auction"] = side["auction"]
        seen["max"] = best(side["auction"], seen["waiting"], seen["max"])
        seen["waiting"] = []
        state.timers.set(side["auction"][1])
    elif seen["auction"] is not None:
        seen["max"] = best(seen["auction"], [side["bid"]], seen["max"])
    else:
        seen["waiting"].append(side["bid"])
        state.timers.set(side["bid"][0])
    state.set(seen)
    return []


def close(at_ms, state):
    """``expires`` passed: the auction's price, if a bid made one; or bids waited in vain."""
    seen = state.get()
    if seen is None:
        return []
    if seen["auction"] is None:
        seen["waiting"] = [b for b in seen["waiting"] if b[0] > at_ms]
        if seen["waiting"]:
            state.set(seen)
        else:
            state.delete()
        return []
    _, expires, seller = seen["auction"]
    if at_ms < expires:
        return []  # a timer of a bid that came before its auction
    state.delete()
    if not seen["max"]:
        return []
    return [{"seller": seller, "expires": expires, "id": state.key, "price": seen["max"]}]


def latest(kept, closed):
    """The ``LAST`` latest closed auctions (``closed`` one more, or a list of them)."""
    more = closed if isinstance(closed, list) else [closed]
    return sorted(kept + more, key=lambda c: (c["expires"], c["id"]))[-LAST:]


def average(kept):
    return {"seller": kept[0]["seller"], "avg_price": sum(c["price"] for c in kept) / len(kept)}


def build(events="nexmark", output="nexmark-q6", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.flat_map(sides)
        .key_by(lambda s: s["id"])
        .process(track, on_timer=close)
        .key_by(lambda c: c["seller"])
        .aggregate([], latest, merge=latest)
        .map(average)
        .sink(output)
    )
    return p


pipeline = build()
