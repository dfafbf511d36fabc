"""A user's typed pipeline, checked by ``mypy --strict`` in the fast tier (``mypy processor tests
bench``): what the typed API infers (`assert_type`), and the wrong functions it refuses.

Each ``# type: ignore[code]`` line is an error mypy must find: with ``warn_unused_ignores``
(strict) an ignore that no longer silences an error fails the type check, so these lines
assert that a wrong callable is a type error. tests/unit/test_typing.py runs the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, assert_type

from processor import (
    Aggregator,
    KeyedStream,
    Meta,
    Pipeline,
    State,
    Stream,
    Window,
    WindowState,
)


@dataclass
class Click:
    page: str
    ms: int


class Clicks:
    """A typed serde: ``p.source(topic, value=Clicks())`` is a ``Stream[Click]``."""

    def loads(self, raw: bytes) -> Click:
        page, ms = raw.decode().split(",")
        return Click(page, int(ms))

    def dumps(self, value: Click) -> bytes:
        return f"{value.page},{value.ms}".encode()


def words_of(line: str) -> Iterator[str]:
    yield from line.split()


def shout(n: int) -> str:
    return "!" * n


def first_seen(page: str, state: State[str]) -> list[str]:
    if state.get() is None:
        state.set(True)
        return [f"{state.key} first"]
    return []


def in_window(page: str, state: WindowState[str]) -> list[int]:
    state.set((state.get() or 0) + 1)
    return [state.get()]


def keyed_by_int(page: str, state: State[int]) -> list[str]:
    return [page]


def build() -> Pipeline:
    p = Pipeline()
    lines = p.source("lines")
    assert_type(lines, Stream[Any])
    words = lines.flat_map(words_of)
    assert_type(words, Stream[str])
    counts = words.key_by(lambda w: w).count()
    assert_type(counts, KeyedStream[str, int])
    counts.map(shout).sink("shouts")
    assert_type(counts.map(shout), KeyedStream[str, str])
    lengths = words.map(len).key_by(lambda n: n % 2)
    assert_type(lengths, KeyedStream[int, int])
    lengths.sum().sink("length_sums")
    lengths.reduce(max).sink("longest")
    lengths.aggregate([0, 0], lambda acc, n: [acc[0] + n, acc[1] + 1]).sink("totals")
    # The counts as a table: per word length, the mean count of the words of that length.
    mean = counts.regroup(lambda word, n: len(word), Aggregator.avg())
    assert_type(mean, KeyedStream[int, float | None])
    mean.sink("mean_count_per_length")
    tagged = words.map(lambda w, meta: f"{meta.topic}:{w}", meta=True)
    assert_type(tagged, Stream[str])
    tagged.sink("tagged")

    clicks = p.source("clicks", value=Clicks(), timestamp=lambda c: c.ms)
    assert_type(clicks, Stream[Click])
    pages = clicks.map(lambda c: c.page).key_by(lambda page: page)
    pages.process(first_seen).sink("first")
    per_window = pages.window(size_ms=10).count()
    assert_type(per_window, KeyedStream[str, int])
    per_window.sink("per_window")
    # Values cross a key_by as JSON: a Click is mapped to its page first.
    bounded = pages.window(size_ms=10, bounds=True, name="bounded").process(in_window)
    assert_type(bounded, KeyedStream[str, Window[str, int]])
    bounded.map(lambda w: w["end"] - w["start"]).sink("window_sizes")
    hottest = pages.window(size_ms=10, bounds=True).count().top(1, by=lambda w: w["value"])
    assert_type(hottest, KeyedStream[str, Window[str, int]])
    hottest.map(lambda w: w["key"]).sink("hottest")
    latest = clicks.map(lambda c: c.ms).window_all(size_ms=10).top(1, by=lambda ms: ms)
    assert_type(latest, KeyedStream[str, Window[None, int]])
    latest.map(lambda w: w["value"]).sink("latest")

    return p


def shout_meta(n: int, meta: Meta) -> str:
    return "!" * n


def refused(p: Pipeline) -> None:
    """What mypy refuses: each call is a type error (never run: it only has to type-check)."""
    words = p.source("lines").flat_map(words_of)
    counts = words.key_by(lambda w: w).count()
    lengths = words.map(len).key_by(lambda n: n % 2)
    clicks = p.source("clicks", value=Clicks())
    pages = clicks.map(lambda c: c.page).key_by(lambda page: page)
    bounded = pages.window(size_ms=10, bounds=True).count()
    words.map(shout)  # type: ignore[arg-type]  # shout takes an int, words are str
    counts.filter(str.isupper)  # type: ignore[arg-type]  # counts' values are int
    words.map(lambda w, m: w)  # type: ignore[arg-type, misc]  # (value, meta) needs meta=True
    words.map(shout_meta, meta=True)  # type: ignore[call-overload]  # wants (int, Meta)
    pages.process(keyed_by_int)  # type: ignore[arg-type]  # a State[int] for str keys
    pages.window(size_ms=10).process(first_seen)  # type: ignore[arg-type]  # no State there
    clicks.map(lambda c: c.url)  # type: ignore[attr-defined]  # a Click has no url
    p.source("more", value=Clicks(), timestamp=lambda c: c.page)  # type: ignore[arg-type, return-value]
    bounded.map(lambda w: w["size"])  # type: ignore[typeddict-item]  # not in a Window
    lengths.reduce(lambda a, b: str(a + b))  # type: ignore[arg-type, return-value]
    counts.top(1, by=lambda n: n)  # type: ignore[misc]  # not the results of a window
    bounded.top(1, by=lambda w: w["size"])  # type: ignore[typeddict-item]  # not in a Window
    words.window_all(size_ms=10, bounds=False)  # type: ignore[arg-type]  # always bounded
    counts.regroup(lambda w, n: w, Aggregator.avg(len))  # type: ignore[arg-type]  # int counts
    counts.regroup(lambda w, n: w, Aggregator.sum(shout))  # type: ignore[arg-type]  # not a number
