"""Clicks per page in event-time windows, and views joined with their clicks.

Input records on ``clicks``: ``{"id": "c1", "page": "home", "view_id": "v1", "ts": <ms>}``;
on ``views``: ``{"id": "v1"}``, whose event time is the Kafka record's timestamp.

- ``clicks-per-page-minute``: clicks per page in tumbling one-minute windows, key
  ``"<page>@<window start ms>"``, emitted once per window when the watermark passes its end;
- ``clicks-per-page-hopping``: the same over one minute every 20 s;
- ``click-sessions``: clicks per page and session (5 s without a click closes it);
- ``view-clicks``: every view and click of it at most 30 s apart, once per pair.

Clicks may arrive up to 2 s out of order; a partition without records for 5 s does not hold
the watermark back.
"""

from processor import Pipeline


def build(
    clicks="clicks",
    views="views",
    per_minute="clicks-per-page-minute",
    hopping="clicks-per-page-hopping",
    sessions="click-sessions",
    view_clicks="view-clicks",
    idle_ms=5000,
):
    """The pipeline over the given topics (the tests run it on topics of their own).
    ``idle_ms``: the chaos run's is longer than any of its faults, so that none makes a
    record late and its check can be exact."""
    p = Pipeline()
    click = p.source(
        clicks, value="json", timestamp=lambda c: c["ts"], out_of_orderness_ms=2000, idle_ms=idle_ms
    )
    view = p.source(views, value="json", idle_ms=idle_ms)

    by_page = click.key_by(lambda c: c["page"], name="by-page")
    by_page.window(size_ms=60_000, name="minute").count(name="per-minute").sink(per_minute)
    (
        by_page.window(size_ms=60_000, slide_ms=20_000, name="hopping")
        .count(name="per-hopping")
        .sink(hopping)
    )
    by_page.window(gap_ms=5000, name="session").count(name="per-session").sink(sessions)

    (
        view.key_by(lambda v: v["id"], name="views-by-id")
        .join(click.key_by(lambda c: c["view_id"], name="clicks-by-view"), within_ms=30_000)
        .map(lambda pair: {"view": pair[0]["id"], "click": pair[1]["id"]})
        .sink(view_clicks)
    )
    return p


pipeline = build()
