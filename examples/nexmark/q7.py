"""Nexmark q7, highest bid: per tumbling 10 s window, ``{auction, bidder, price, date_time,
window_end}`` for the bid(s) with the highest price (all of them on a tie).

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL (windows as Flink writes them)::

    SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
    FROM bid B
    JOIN (SELECT MAX(price) AS maxprice, window_end AS date_time
          FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
          GROUP BY window_start, window_end) B1
    ON B.price = B1.maxprice
    WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time

(``window_end`` in place of ``B.extra``, and the bid's window strictly ``[start, end)``.)
The maximum and the join back to its bids are one aggregation per window that keeps the bids
of the highest price, its end from ``window(bounds=True)``. One API gap of issue #42 shows: no
window over a whole stream. The bids are keyed by their window by hand, ``date_time //
10_000``, then windowed per key (each key has exactly one window), which spreads the windows
over the tasks instead of putting every bid on one.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
SIZE_MS = 10_000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def highest(top, bid):
    """The bids of the highest price so far (``bid`` one more, or a list of them)."""
    bids = bid if isinstance(bid, list) else [bid]
    best = max([b["price"] for b in top + bids], default=0)
    return [b for b in top + bids if b["price"] == best]


def fields(bid):
    """What the output needs of a bid (the window keeps no more)."""
    return {k: bid[k] for k in ("auction", "bidder", "price", "date_time")}


def rows(result):
    return [{**b, "window_end": result["end"]} for b in result["value"]]


def build(events="nexmark", output="nexmark-q7", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.filter(lambda e: "Bid" in e)
        .map(lambda e: fields(e["Bid"]))
        .key_by(lambda b: b["date_time"] // SIZE_MS)
        .window(size_ms=SIZE_MS, bounds=True)
        .aggregate([], highest, merge=highest)
        .flat_map(rows)
        .sink(output)
    )
    return p


pipeline = build()
