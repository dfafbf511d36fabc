"""Nexmark q3, local item suggestion: ``{name, city, state, id}`` for each auction of
category 10 whose seller lives in Oregon, Idaho or California.

Input: the ``nexmark`` crate's events (see ``q0.py``); the crate writes states in lower case.

SQL::

    SELECT P.name, P.city, P.state, A.id
    FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca')

An inner join without a time bound, emitted as soon as both sides are there, whichever
arrives first: ``join(within_ms=None)``. The filters run before the join, as a SQL planner
pushes them down. Its state keeps both sides for good, like the SQL join's: the wanted
persons, and the auctions of category 10 (those of sellers outside the three states never
meet anyone).
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
STATES = ("or", "id", "ca")


def event_time(event):
    return next(iter(event.values()))["date_time"]


def wanted_person(event):
    return "Person" in event and event["Person"]["state"] in STATES


def wanted_auction(event):
    return "Auction" in event and event["Auction"]["category"] == 10


def row(person, auction):
    return {
        "name": person["name"],
        "city": person["city"],
        "state": person["state"],
        "id": auction["id"],
    }


def build(events="nexmark", output="nexmark-q3", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    people = source.filter(wanted_person).key_by(lambda e: e["Person"]["id"])
    auctions = source.filter(wanted_auction).key_by(lambda e: e["Auction"]["seller"])
    joined = people.join(auctions, within_ms=None)
    joined.map(lambda pair: row(pair[0]["Person"], pair[1]["Auction"])).sink(output)
    return p


pipeline = build()
