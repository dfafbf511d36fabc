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
The ``TUMBLE`` over all bids, ungrouped, is a window over the whole stream,
``window_all(size_ms=10_000)``; the maximum and the join back to the bids of that price are
a top-N per window with N = 1, ties kept: ``top(1, by=price)`` emits every bid of the
highest price of the window, each with its window (``{key, start, end, value}``), whose end
is ``window_end``. As the SQL's ungrouped window, it runs on one task: every bid goes there
(windows are not pre-aggregated before their shuffle), which keeps only the best so far.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
SIZE_MS = 10_000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def fields(bid):
    """What the output needs of a bid (the window keeps no more)."""
    return {k: bid[k] for k in ("auction", "bidder", "price", "date_time")}


def row(result):
    return {**result["value"], "window_end": result["end"]}


def build(events="nexmark", output="nexmark-q7", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.filter(lambda e: "Bid" in e)
        .map(lambda e: fields(e["Bid"]))
        .window_all(size_ms=SIZE_MS)
        .top(1, by=lambda bid: bid["price"])
        .map(row)
        .sink(output)
    )
    return p


pipeline = build()
