"""Nexmark q2, selection: ``{auction, price}`` of each bid on an auction whose id is a
multiple of 123.

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL: ``SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0``: two ``filter``s and a
``map``.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def build(events="nexmark", output="nexmark-q2", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.filter(lambda e: "Bid" in e and e["Bid"]["auction"] % 123 == 0)
        .map(lambda e: {"auction": e["Bid"]["auction"], "price": e["Bid"]["price"]})
        .sink(output)
    )
    return p


pipeline = build()
