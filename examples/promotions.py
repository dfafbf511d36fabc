"""Clicks per page and second, per site and ten seconds, and around each promotion: two timed
stages in a chain, the first a window with lateness.

Input records on ``clicks``: ``{"id": "c1", "page": "shop/cart", "ts": <ms>}`` (the site is
the page's first part); on ``promotions``: ``{"id": "p1", "page": "shop/cart", "ts": <ms>}``,
a promotion shown on a page, in order.

- ``clicks-per-page-second``: key ``"<page>@<second start ms>"``, value ``{"page": ...,
  "second": <start ms>, "clicks": n}``, once per page and second. Clicks may come up to 1 s
  out of order without holding anything back; stragglers up to 2 s behind the watermark still
  count (``lateness_ms``), and a page's second is emitted once they can no longer come.
- ``clicks-per-site-10s``: those results summed per site in ten-second windows, key
  ``"<site>@<start ms>"``, value the clicks.
- ``promotion-clicks``: every promotion with each of its page's seconds that ends at most 3 s
  from it (a second's event time is its last millisecond), key the page, value ``{"promo":
  ..., "second": <start ms>, "clicks": n}``, once per pair.

A page's second carries the event time of its last millisecond but is emitted up to the
lateness after it: the first stage holds back the watermark it forwards by as much, so the
window and the join downstream never find its results late.
"""

from processor import Pipeline

SECOND_MS = 1000
LATENESS_MS = 2000  # stragglers behind the watermark that still count
OUT_OF_ORDER_MS = 1000  # the clicks' bound
SITE_WINDOW_MS = 10_000
PROMOTION_WITHIN_MS = 3000


def one_click(click):
    ts = click["ts"]
    return {"page": click["page"], "second": ts - ts % SECOND_MS, "clicks": 1}


def add_clicks(a, b):
    return {"page": a["page"], "second": a["second"], "clicks": a["clicks"] + b["clicks"]}


def site(page_second):
    return page_second["page"].split("/")[0]


def build(
    clicks="clicks",
    promotions="promotions",
    per_second="clicks-per-page-second",
    per_site="clicks-per-site-10s",
    promotion_clicks="promotion-clicks",
    idle_ms=2000,
):
    """The pipeline over the given topics (the tests run it on topics of their own).
    ``idle_ms``: a partition without records that long does not hold the watermark back."""
    p = Pipeline()
    click = p.source(
        clicks,
        value="json",
        timestamp=lambda c: c["ts"],
        out_of_orderness_ms=OUT_OF_ORDER_MS,
        idle_ms=idle_ms,
    )
    promotion = p.source(promotions, value="json", timestamp=lambda c: c["ts"], idle_ms=idle_ms)

    seconds = (
        click.key_by(lambda c: c["page"], name="by-page")
        .map(one_click, name="one-click")
        .window(size_ms=SECOND_MS, lateness_ms=LATENESS_MS, name="page-second")
        .reduce(add_clicks, name="per-page-second")
    )
    seconds.sink(per_second, name="page-seconds")
    (
        seconds.key_by(site, name="by-site")
        .map(lambda s: s["clicks"], name="site-clicks")
        .window(size_ms=SITE_WINDOW_MS, name="site-10s")
        .sum(name="per-site")
        .sink(per_site, name="site-totals")
    )
    (
        seconds.key_by(lambda s: s["page"], name="seconds-by-page")
        .join(promotion.key_by(lambda c: c["page"], name="promotions-by-page"), PROMOTION_WITHIN_MS)
        .map(
            lambda pair: {
                "promo": pair[1]["id"],
                "second": pair[0]["second"],
                "clicks": pair[0]["clicks"],
            },
            name="promotion-click",
        )
        .sink(promotion_clicks, name="promotion-clicks")
    )
    return p


pipeline = build()
