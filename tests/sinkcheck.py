"""A sink topic's committed records against the reference execution's (pure, no I/O).

An aggregation's sink is a changelog: the engine writes one update per key and checkpoint
where the reference writes one per record, so only the final value per key must match. When
the reference's values for a key strictly increase (a count, a sum of positive values), the
engine's updates for it must strictly increase too: a repeated or smaller value is an update
applied twice (Kafka's EOS system test checks the same). Any other sink must hold exactly the
reference's records, as a multiset.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import asdict, dataclass

from tests.reference import SinkOutput, SinkRecord


@dataclass
class SinkCheck:
    records: int = 0  # records read from the sink
    keys: int = 0  # keys (changelog) or records (otherwise) the reference expects
    lost: int = 0  # changelog: counts short of a numeric final value, or keys without output
    duplicated: int = 0  # non-increasing updates, counts beyond the final, extra records
    unknown: int = 0  # keys (changelog) or records the reference never wrote
    wrong: int = 0  # changelog: keys whose final value differs (non-numeric values)

    @property
    def exact(self) -> bool:
        return self.lost == self.duplicated == self.unknown == self.wrong == 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def check_sink(expected: SinkOutput, got: list[SinkRecord]) -> SinkCheck:
    """``got``: the sink's records, each partition in log order (a key lives in one)."""
    if expected.changelog:
        return _check_changelog(expected, got)
    want, have = expected.multiset(), Counter(got)
    extra = have - want
    return SinkCheck(
        records=len(got),
        keys=len(expected.records),
        lost=sum((want - have).values()),
        duplicated=sum(n for record, n in extra.items() if record in want),
        unknown=sum(n for record, n in extra.items() if record not in want),
    )


def _check_changelog(expected: SinkOutput, got: list[SinkRecord]) -> SinkCheck:
    reference = _by_key(expected.records)
    updates = _by_key(got)
    check = SinkCheck(records=len(got), keys=len(reference))
    check.unknown = len(updates.keys() - reference.keys())
    for key, values in reference.items():
        seen = updates.get(key, [])
        numbers = _increasing_numbers(values)
        if numbers is None:  # order-dependent values: only the final one is defined
            if not seen:
                check.lost += 1
            elif seen[-1] != values[-1]:
                check.wrong += 1
            continue
        have = _numbers(seen)
        if have is None:
            check.wrong += 1
            continue
        exact, last = numbers[-1], (have[-1] if have else 0)
        check.duplicated += sum(1 for a, b in itertools.pairwise(have) if a >= b)
        check.lost += max(0, int(exact - last))
        check.duplicated += max(0, int(last - exact))
    return check


def _by_key(records: list[SinkRecord]) -> dict[bytes | None, list[bytes]]:
    out: dict[bytes | None, list[bytes]] = {}
    for key, value in records:
        out.setdefault(key, []).append(value)
    return out


def _number(value: bytes) -> float | None:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    if isinstance(parsed, bool) or not isinstance(parsed, int | float):
        return None
    return parsed


def _numbers(values: list[bytes]) -> list[float] | None:
    """The values as numbers, or None if one is not a JSON number."""
    numbers = [_number(v) for v in values]
    checked = [n for n in numbers if n is not None]
    return checked if len(checked) == len(numbers) else None


def _increasing_numbers(values: list[bytes]) -> list[float] | None:
    numbers = _numbers(values)
    if numbers is None or any(a >= b for a, b in itertools.pairwise(numbers)):
        return None
    return numbers
