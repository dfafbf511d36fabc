"""Nexmark q8, new users: per tumbling 10 s window, ``{id, name, window_start}`` for each
person who registered and created an auction in that window.

Input: the ``nexmark`` crate's events (see ``q0.py``).

SQL (windows as Flink writes them)::

    SELECT P.id, P.name, P.starttime
    FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
          GROUP BY id, name, window_start, window_end) P
    JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
          GROUP BY seller, window_start, window_end) A
    ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime

A window join: persons and auctions tagged in one ``flat_map``, keyed by the person's id
(the auction's seller) and windowed together, one aggregation per person and window that
notes the person and whether an auction came; a window with both gives one row, with its
window's start (``window(bounds=True)``: ``{key, start, end, value}``).
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
SIZE_MS = 10_000


def event_time(event):
    return next(iter(event.values()))["date_time"]


def sides(event):
    if "Person" in event:
        person = event["Person"]
        return [{"id": person["id"], "name": person["name"]}]
    if "Auction" in event:
        return [{"id": event["Auction"]["seller"], "auction": True}]
    return []


def note(seen, side):
    """A person's name and whether an auction of theirs came, in one window."""
    if "name" in side:
        return {**seen, "name": side["name"]}
    return {**seen, "auction": True}


def new_user(result):
    seen = result["value"]
    if seen["name"] is None or not seen["auction"]:
        return []
    return [{"id": result["key"], "name": seen["name"], "window_start": result["start"]}]


def build(events="nexmark", output="nexmark-q8", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    (
        source.flat_map(sides)
        .key_by(lambda s: s["id"])
        .window(size_ms=SIZE_MS, bounds=True)
        .aggregate({"name": None, "auction": False}, note)
        .flat_map(new_user)
        .sink(output)
    )
    return p


pipeline = build()
