"""Nexmark q1, currency conversion: each bid as ``{auction, bidder, price, date_time}`` with
its price in euros, 0.908 x the bid's price.

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL: ``SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid``: a ``filter`` on
the ``Bid`` member and a ``map``. The price is a float (Flink SQL's is a DECIMAL).
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def in_euros(bid):
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": 0.908 * bid["price"],
        "date_time": bid["date_time"],
    }


def build(events="nexmark", output="nexmark-q1", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    source.filter(lambda e: "Bid" in e).map(lambda e: in_euros(e["Bid"])).sink(output)
    return p


pipeline = build()
