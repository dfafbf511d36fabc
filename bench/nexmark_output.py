"""A Nexmark query's output against its definition (tests/nexmark_data.py) over the same
events: the insert-only queries as a multiset of rows (each row once, nothing else), the
updating ones (q4, q6) by the last value of each key (a tombstone deletes the key), as the
engine's tests compare them (tests/unit/test_nexmark.py). Floats are compared to 9 significant
digits: an average's sum may add in another order."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests import nexmark_data as nexmark
from tests.integration.pipeline_run import read_committed

UPDATING_KEYS = {"q4": "category", "q6": "seller"}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def _row(row: dict[str, Any]) -> str:
    return json.dumps({k: _rounded(v) for k, v in row.items()}, sort_keys=True)


def expected(query: str, stream: list[nexmark.Event]) -> Counter[str]:
    want = getattr(nexmark, query)(stream)
    if query in UPDATING_KEYS:
        return Counter(f"{k}={_row(v)}" for k, v in want.items())
    return Counter(_row(r) for r in want)


def got(query: str, bootstrap: str, topic: str) -> Counter[str]:
    """The committed output of ``topic``: rows, or the last row of each key."""
    records = [r for part in read_committed(bootstrap, topic).values() for r in part]
    if query not in UPDATING_KEYS:
        return Counter(_row(json.loads(value)) for _, value, _ in records if value is not None)
    field = UPDATING_KEYS[query]
    last: dict[str, str | None] = {}
    for key, value, _ in records:
        if key is None:
            raise ValueError(f"{topic}: a record without a key")
        parsed = json.loads(key)
        name = str(parsed[field] if isinstance(parsed, dict) else parsed)
        last[name] = None if value is None else _row(json.loads(value))
    return Counter(f"{k}={v}" for k, v in last.items() if v is not None)


def compare(want: Counter[str], have: Counter[str]) -> dict[str, Any]:
    """Whether they are equal, and a few rows of each difference."""
    missing, extra = want - have, have - want
    return {
        "exact": not missing and not extra,
        "rows": sum(want.values()),
        "got": sum(have.values()),
        "missing": sum(missing.values()),
        "extra": sum(extra.values()),
        "missing_sample": sorted(missing)[:5],
        "extra_sample": sorted(extra)[:5],
    }
