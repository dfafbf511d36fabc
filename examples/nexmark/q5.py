"""Nexmark q5, hot items: per sliding window of 10 s every 2 s, ``{auction, count,
window_start, window_end}`` for the auction(s) with the most bids (all of them on a tie).

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL (windows as Flink writes them)::

    SELECT AuctionBids.auction, AuctionBids.num
    FROM (SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
          FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND,
                         INTERVAL '10' SECOND))
          GROUP BY auction, window_start, window_end) AS AuctionBids
    JOIN (SELECT max(num) AS maxn, starttime, endtime
          FROM (... the same counts ...) GROUP BY starttime, endtime) AS MaxBids
    ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
       AND AuctionBids.num >= MaxBids.maxn

The inner ``GROUP BY`` is ``key_by(auction).window(size_ms=10_000, slide_ms=2_000).count()``,
each count with its window (``window(bounds=True)``: ``{key, start, end, value}``). The join
with the per-window maximum, ``num >= maxn``, is a top-N per window with N = 1, ties kept:
``top(1, by=count)`` ranks each window's counts over all auctions and emits those of the
highest, each with its window, once the watermark has closed the window.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
SIZE_MS, SLIDE_MS = 10_000, 2_000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def hot(result):
    return {
        "auction": result["key"],
        "count": result["value"],
        "window_start": result["start"],
        "window_end": result["end"],
    }


def build(events="nexmark", output="nexmark-q5", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.filter(lambda e: "Bid" in e)
        .key_by(lambda e: e["Bid"]["auction"])
        .window(size_ms=SIZE_MS, slide_ms=SLIDE_MS, bounds=True)
        .count()
        .top(1, by=lambda result: result["value"])
        .map(hot)
        .sink(output)
    )
    return p


pipeline = build()
