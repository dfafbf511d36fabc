"""Input for examples/carts.py and the output it must give, computed directly: shared by the
broker-free test and the one that SIGKILLs a worker mid-stream.

Every session has a user of its own: one to four adds a few seconds apart, then a checkout at
most 15 s after the last add, or nothing. Events are in increasing event time in the order
they are produced (so a checkout is always read before the watermark reaches its cart's timer)
and a tick far ahead on every partition at the end lets the watermark pass every timer.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ABANDON_AFTER_MS = 30_000
SOURCES = ["web", "ios", "android"]


@dataclass
class Carts:
    # key, value, headers, partition (None: by key)
    records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]] = field(
        default_factory=list
    )
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (key, canonical JSON)
    per_type: Counter[str] = field(default_factory=Counter)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def carts(sessions: int, partitions: int, seed: int) -> Carts:
    rng = random.Random(seed)
    events: list[tuple[int, str, dict[str, Any], str]] = []  # ts, user, event, source header
    out = Carts()
    start = 1_000_000
    for n in range(sessions):
        user = f"u{n}"
        start += rng.randrange(0, 400)
        t = start
        adds = rng.randrange(1, 5)
        source = ""
        for i in range(adds):
            if i:
                t += rng.randrange(1, 5000)
            source = rng.choice(SOURCES)
            events.append((t, user, {"type": "add", "ts": t}, source))
            if rng.random() < 0.3:
                events.append((t, user, {"type": "view", "ts": t}, rng.choice(SOURCES)))
        if rng.random() < 0.6:
            t += rng.randrange(1, 15_000)
            events.append((t, user, {"type": "checkout", "ts": t}, rng.choice(SOURCES)))
            result = {"user": user, "checked_out": adds, "source": source}
        else:
            last_add = t
            result = {"user": user, "abandoned": adds, "at": last_add + ABANDON_AFTER_MS}
            result["source"] = source
        out.outcomes[user, canonical(result)] += 1
    events.sort(key=lambda e: e[0])  # stable: a user's events keep their order
    for _ts, user, event, source in events:
        out.records.append(
            (user.encode(), json.dumps(event).encode(), [("source", source.encode())], None)
        )
        out.per_type[event["type"]] += 1
    end = events[-1][0] + 10 * ABANDON_AFTER_MS
    for p in range(partitions):
        tick = {"type": "tick", "ts": end}
        out.records.append((f"tick-{p}".encode(), json.dumps(tick).encode(), [], p))
        out.per_type["tick"] += 1
    return out
