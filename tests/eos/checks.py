"""The checks of Kafka's EOS test (EosTestDriver.verify), as pure functions over records read
back: no Kafka here, so a unit test can feed them doctored output.

- ``echo`` equals ``data`` partition by partition, record by record;
- each aggregate's updates per key equal the running aggregate of the key's input values,
  update by update, all in the key's own partition (murmur2, as the input's).

Each check tallies records verified, lost, duplicated and wrong (a value nobody expects,
an update in another partition, or a record out of its place).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

Record = tuple[bytes | None, bytes | None]  # key, value
Partitions = Mapping[int, Sequence[Record]]
T = TypeVar("T", bound=Hashable)

# How far ahead in the expected sequence a record is looked for before it counts as wrong
# rather than as coming after lost ones: bounds the work on a badly broken output.
LOOKAHEAD = 1000
EXAMPLES = 5


@dataclass
class Tally:
    """Records of one or more checks by outcome, and a few examples of what went wrong."""

    verified: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == self.duplicated == self.wrong == 0

    def add(self, other: Tally) -> None:
        self.verified += other.verified
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.wrong += other.wrong
        self.examples.extend(other.examples[: max(0, EXAMPLES - len(self.examples))])

    def note(self, example: str) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


def align(expected: Sequence[T], got: Sequence[T], where: str = "") -> Tally:
    """``got`` against ``expected``, in order. A record equal to the next expected one is
    verified; one equal to a record already verified is a duplicate (a replay); one found a
    little further on is verified after the skipped ones, counted lost; any other is wrong.
    A skipped record that turns up later is wrong (out of its place), not lost; a wrong one
    takes the place of the expected one unless the next record is that one."""
    tally = Tally()
    done: Counter[T] = Counter()
    skipped: Counter[T] = Counter()
    j = 0
    for i, item in enumerate(got):
        if j < len(expected) and item == expected[j]:
            tally.verified += 1
            done[item] += 1
            j += 1
            continue
        if done[item] > 0:
            tally.duplicated += 1
            tally.note(f"{where}[{i}]: {item!r} again")
            continue
        ahead = _find(expected, item, j, j + LOOKAHEAD)
        if ahead is not None:
            for missed in expected[j:ahead]:
                skipped[missed] += 1
            tally.lost += ahead - j
            tally.note(f"{where}[{i}]: {ahead - j} expected records missing before {item!r}")
            tally.verified += 1
            done[item] += 1
            j = ahead + 1
        elif skipped[item] > 0:
            skipped[item] -= 1
            tally.lost -= 1
            tally.wrong += 1
            tally.note(f"{where}[{i}]: {item!r} out of order")
        else:
            tally.wrong += 1
            tally.note(f"{where}[{i}]: {item!r} expected {_at(expected, j)}")
            following = got[i + 1] if i + 1 < len(got) else None
            if j < len(expected) and following != expected[j]:
                j += 1  # in place of the expected one, not an extra before it
    if j < len(expected):
        tally.lost += len(expected) - j
        tally.note(f"{where}: the last {len(expected) - j} of {len(expected)} records missing")
    return tally


def _find(items: Sequence[T], item: T, start: int, stop: int) -> int | None:
    for k in range(start, min(stop, len(items))):
        if items[k] == item:
            return k
    return None


def _at(items: Sequence[T], j: int) -> str:
    return repr(items[j]) if j < len(items) else "nothing more"


def check_echo(data: Partitions, echo: Partitions) -> Tally:
    """``echo``'s partition p is ``data``'s partition p, record by record."""
    tally = Tally()
    for partition in sorted(data.keys() | echo.keys()):
        expected = list(data.get(partition, ()))
        tally.add(align(expected, list(echo.get(partition, ())), f"echo-{partition}"))
    return tally


Aggregate = Callable[[int, int], int]

# Each output's running aggregate: (its value after the first record, how a record folds in).
AGGREGATES: dict[str, tuple[Callable[[int], int], Aggregate]] = {
    "min": (lambda v: v, min),
    "sum": (lambda v: v, lambda acc, v: acc + v),
    "max": (lambda v: v, max),
    "cnt": (lambda _v: 1, lambda acc, _v: acc + 1),
}


def running(kind: str, values: Iterable[int]) -> list[int]:
    """The aggregate ``kind`` after each of ``values``: what one update per record emits.

    >>> running("min", [5, 7, 3]), running("sum", [5, 7, 3]), running("cnt", [5, 7, 3])
    ([5, 5, 3], [5, 12, 15], [1, 2, 3])
    """
    first, fold = AGGREGATES[kind]
    out: list[int] = []
    for value in values:
        out.append(first(value) if not out else fold(out[-1], value))
    return out


def check_aggregate(kind: str, data: Partitions, output: Partitions) -> Tally:
    """Per key: ``output``'s updates, all in the key's input partition, are the running
    ``kind`` aggregate of the key's input values, update by update."""
    tally = Tally()
    inputs: dict[bytes | None, list[int]] = {}
    home: dict[bytes | None, int] = {}
    for partition, records in data.items():
        for key, value in records:
            home[key] = partition
            inputs.setdefault(key, []).append(_int(value))
    updates: dict[bytes | None, list[int | None]] = {}
    for partition, records in sorted(output.items()):
        for key, value in records:
            if home.get(key, partition) != partition:
                tally.wrong += 1
                tally.note(f"{kind}: key {key!r} in partition {partition}, not {home[key]}")
                continue
            updates.setdefault(key, []).append(_int_or_none(value))
    for key in inputs.keys() | updates.keys():
        expected: list[int | None] = list(running(kind, inputs.get(key, [])))
        tally.add(align(expected, updates.get(key, []), f"{kind}[{key!r}]"))
    return tally


def _int(raw: bytes | None) -> int:
    return int(raw or b"")


def _int_or_none(raw: bytes | None) -> int | None:
    """An update's value; None (wrong against any expected one) if it is not an int."""
    try:
        return _int(raw)
    except ValueError:
        return None
