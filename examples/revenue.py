"""Revenue per user from JSON orders: only paid orders count.

Input records on ``orders``: ``{"user": "ann", "amount": 12.5, "status": "paid"}``.
"""

from processor import Pipeline


def build(orders="orders", revenue="revenue"):
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    pipeline = Pipeline()
    (
        pipeline.source(orders, value="json")
        .filter(lambda order: order.get("status") == "paid")
        .key_by(lambda order: order["user"])
        .map(lambda order: order["amount"])
        .sum()
        .sink(revenue)
    )
    return pipeline


pipeline = build()
