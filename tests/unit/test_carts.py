"""examples/carts.py through `processor.testing` (the engine's stage code, no broker): every
abandoned cart once, every checkout once, exactly as computed directly from the input, and
the count per event type 1, 2, 3... (the same check tests/integration/test_carts.py makes of
the engine with a worker SIGKILLed mid-stream)."""

from __future__ import annotations

import runpy
from collections import Counter
from pathlib import Path

import pytest

from processor.testing import Driver
from tests.carts_data import canonical, carts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "carts.py"


@pytest.mark.parametrize(("partitions", "checkpoint_every"), [(1, 1000), (3, 97)])
def test_carts_through_the_harness_are_exact(partitions: int, checkpoint_every: int) -> None:
    data = carts(sessions=400, partitions=2, seed=partitions)
    pipeline = runpy.run_path(str(EXAMPLE))["build"]()
    driver = Driver(pipeline, partitions, source_partitions=2, checkpoint_every=checkpoint_every)
    for key, value, headers, _ in data.records:
        driver.send("cart-events", value, key=key, headers=headers)
    driver.finish()
    outcomes = driver.output("cart-outcomes")
    got = Counter((key, canonical(value)) for key, value in outcomes)
    assert got == data.outcomes
    kinds = [h for h in driver.headers("cart-outcomes")]
    assert len(kinds) == len(outcomes)
    assert all(
        h == [("outcome", b"abandoned" if "abandoned" in v else b"checkout")]
        for h, (_, v) in zip(kinds, outcomes, strict=True)
    )
    counts: dict[str, list[int]] = {}
    for event_type, count in driver.output("events-per-type"):
        counts.setdefault(event_type, []).append(count)
    assert counts == {t: list(range(1, n + 1)) for t, n in data.per_type.items()}
    assert driver.dead_records() == []
