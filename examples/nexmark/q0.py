"""Nexmark q0, pass-through: every bid, all its fields.

Input on ``events``: one record per line of the ``nexmark`` crate's (0.2.0) ``nexmark
--no-wait``, a JSON object with one member, ``Person``, ``Auction`` or ``Bid``, holding the
event with the crate's field names; ``date_time`` (ms) is the event time. A bid is
``{"auction", "bidder", "price", "channel", "url", "date_time", "extra"}``.

SQL: ``SELECT auction, bidder, price, date_time, extra FROM bid`` (here every field of the
bid, ``channel`` and ``url`` too). The ``WHERE``-less ``FROM bid`` is the ``filter`` on the
``Bid`` member; the projection is the ``map`` to the member's object.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000


def event_time(event):
    """``date_time`` of whichever event the record holds."""
    return next(iter(event.values()))["date_time"]


def build(events="nexmark", output="nexmark-q0", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    bids = source.filter(lambda e: "Bid" in e).map(lambda e: e["Bid"])
    bids.sink(output)
    return p


pipeline = build()
