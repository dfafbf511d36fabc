"""Nexmark q3, local item suggestion: ``{name, city, state, id}`` for each auction of
category 10 whose seller lives in Oregon, Idaho or California.

Input: the ``nexmark`` crate's events (see ``q0.py``); the crate writes states in lower case.

SQL::

    SELECT P.name, P.city, P.state, A.id
    FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca')

An inner join without a time bound, emitted as soon as both sides are there, whichever
arrives first. The pipeline API's ``join`` needs ``within_ms`` (a person may sell for ever),
so this is the hand-written form (an API gap, issue #42): both event types tagged in one
``flat_map``, keyed by the person's id, and a ``process`` that keeps the person once seen and
buffers the auctions that came before their seller. A seller outside the three states never
comes, so the auctions of such sellers never leave the state (the filter on the person runs
before the join, as a SQL planner pushes it down): unbounded, like the SQL join's.
"""

from processor import Pipeline

OUT_OF_ORDERNESS_MS = 1000
STATES = ("or", "id", "ca")


def event_time(event):
    return next(iter(event.values()))["date_time"]


def sides(event):
    """A wanted person or auction, tagged; anything else dropped."""
    person, auction = event.get("Person"), event.get("Auction")
    if person is not None and person["state"] in STATES:
        return [{"person": person}]
    if auction is not None and auction["category"] == 10:
        return [{"auction": auction}]
    return []


def seller_id(side):
    return side["person"]["id"] if "person" in side else side["auction"]["seller"]


def row(person, auction):
    return {
        "name": person["name"],
        "city": person["city"],
        "state": person["state"],
        "id": auction["id"],
    }


def join(side, state):
    """Per seller: ``{"person": ..., "waiting": [auctions before their seller]}``."""
    seen = state.get({"person": None, "waiting": []})
    if "person" in side:
        person, waiting = side["person"], seen["waiting"]
        state.set({"person": person, "waiting": []})
        return [row(person, a) for a in waiting]
    if seen["person"] is not None:
        return [row(seen["person"], side["auction"])]
    seen["waiting"].append(side["auction"])
    state.set(seen)
    return []


def build(events="nexmark", output="nexmark-q3", out_of_orderness_ms=OUT_OF_ORDERNESS_MS):
    p = Pipeline()
    source = p.source(
        events, value="json", timestamp=event_time, out_of_orderness_ms=out_of_orderness_ms
    )
    source.flat_map(sides).key_by(seller_id).process(join).sink(output)
    return p


pipeline = build()
