"""Window operators built of the primitives (``key_by``, ``window``, ``aggregate``,
``flat_map``), as Bytewax builds its composite operators: a window over a whole stream
(`window_all`, Flink's ``windowAll``) and the top ``n`` per window (`top_values`, `top_results`).

None of them keeps state of its own: what they hold is the state of the windows they are
made of, snapshotted, restored and replayed as any window's.

A window over the whole stream is a window under one key, None: it runs on the one task that
owns that key (no parallelism), and every record goes through the shuffle to it. Windowed
aggregations are not pre-aggregated before their shuffle (only per-key aggregations without a
window are: `processor.plan.stages`), ``merge=`` or not, so that task folds every record, as
in Flink's ``windowAll`` (Flink SQL's two-phase aggregation would combine first).

>>> p = Pipeline()
>>> revenue = p.source("bids", value="json").window_all(size_ms=10).reduce(lambda a, b: a + b)
>>> revenue.map(lambda w: [w["key"], w["start"], w["end"], w["value"]]).sink("revenue")
>>> run(p, {"bids": [("a", 3, 1), ("b", 4, 8), ("a", 5, 12)]})
{'revenue': [('None@0', [None, 0, 10, 7]), ('None@10', [None, 10, 20, 5])]}

The top ``n`` of a window, largest ``by`` first: of the values of each key's window
(``window(..., bounds=True).top(...)``, and over the whole stream after `window_all`), or of
the results of a windowed aggregation, all keys of a window together (``.count().top(...)``:
the auctions with the most bids of each window). Each output row is a result with its window,
``{"key", "start", "end", "value"}``, and has the event time of every window result, the
window's end - 1. ``ties=True`` (the default) emits every row tied with the n-th one (SQL's
``RANK() <= n``), ``ties=False`` exactly ``n`` (``ROW_NUMBER() <= n``; among tied rows the
smallest JSON text of the row first, the same in every run and replay).

>>> p = Pipeline()
>>> counts = p.source("bids").key_by(str).window(size_ms=10, bounds=True).count()
>>> counts.top(1, by=lambda w: w["value"]).map(lambda w: [w["key"], w["value"]]).sink("hot")
>>> run(p, {"bids": [("", "a", 1), ("", "b", 2), ("", "a", 3), ("", "b", 4), ("", "c", 5)]})
{'hot': [('0@9', ['a', 2]), ('0@9', ['b', 2])]}
"""

from __future__ import annotations

import json
from typing import Any

from processor.api import aggregations
from processor.api.args import check_callable
from processor.api.graph import Graph
from processor.api.node import FilterNode, FlatMapNode, KeyByNode, Node, PerKeyNode, WindowNode
from processor.errors import PipelineError


def _no_key(_value: Any) -> None:
    """The key of every record of a window over the whole stream."""
    return None


def window_all(
    graph: Graph,
    parent: Node,
    size_ms: Any,
    slide_ms: Any,
    gap_ms: Any,
    lateness_ms: Any,
    name: str | None,
    bounds: Any,
) -> WindowNode:
    """The window node of a window over the whole stream after ``parent``: a ``key_by`` to the
    key None (named ``name``, or ``<parent>.window_all``), then the window, its results always
    with their bounds (a result keyed ``"None@<start>"`` would be of no use without them)."""
    if bounds is not True:
        raise PipelineError(
            f"window_all(bounds={bounds!r}): a window over the whole stream has no key to "
            "show its window in, so its results always carry it (leave bounds out)"
        )
    key_by = graph.add(
        KeyByNode(_name(graph, parent, "window_all", name), parent, True, fn=_no_key)
    )
    return aggregations.window(
        graph, key_by, size_ms, slide_ms, gap_ms, lateness_ms, None, bounds=True
    )


def top_values(graph: Graph, window: Node, n: Any, by: Any, ties: Any, name: str | None) -> Node:
    """Per key and window (``window`` a node of ``window(..., bounds=True)``), the ``n`` values
    with the largest ``by(value)``, each as a `processor.Window` with the value: an aggregate
    keeping the best so far, its result's list spread into rows.

    >>> p = Pipeline()
    >>> bids = p.source("bids", value="json")
    >>> best = bids.window_all(size_ms=10).top(2, by=lambda b: b["price"], ties=False)
    >>> best.map(lambda w: (w["end"], w["value"]["id"])).sink("best")
    >>> prices = [(1, 5, 0), (2, 9, 1), (3, 5, 2), (4, 1, 3), (5, 7, 12)]
    >>> run(p, {"bids": [("", {"id": i, "price": v}, t) for i, v, t in prices]})
    {'best': [('None@0', [10, 2]), ('None@0', [10, 1]), ('None@10', [20, 5])]}
    """
    top = _Top(n, by, ties, "top")
    kept = aggregations.aggregate(graph, window, [], top.keep, top.merge, name, "checkpoint", None)
    return graph.add(FlatMapNode(graph.named(kept, FlatMapNode, None), kept, True, fn=_spread))


def top_results(graph: Graph, results: Node, n: Any, by: Any, ties: Any, name: str | None) -> Node:
    """Per window, the ``n`` results (of a windowed aggregation or ``process`` with
    ``bounds=True``, perhaps filtered) with the largest ``by(result)``, over all keys.

    The results are keyed again by their window's start (a shuffle, named ``name`` or
    ``<results>.top``) and gathered by a tumbling window of 1 ms: every result of a window
    ``[start, end)`` has the event time ``end - 1``, so they all fall into ``[end - 1, end)``,
    which closes once the watermark passes ``end``. That is when the windows that made them
    closed (held back while they may still emit, so none of them is late here): the top of a
    window comes with the watermark that closed it. Its rows keep the results' event time,
    ``end - 1``, and are keyed ``"<start>@<end - 1>"``. Each task ships only the results
    that may rank (`_Top.bound`: those below the n-th best of what it ships together cannot),
    so the shuffle carries a few results per window and task, not one per key.

    >>> p = Pipeline()
    >>> per_page = p.source("views").key_by(str).window(size_ms=10, slide_ms=5, bounds=True)
    >>> tops = per_page.count().top(1, by=lambda w: w["value"])
    >>> tops.map(lambda w: f"{w['start']}: {w['key']}").sink("top-page")
    >>> run(p, {"views": [("", "a", 1), ("", "b", 6), ("", "b", 7)]})
    {'top-page': [('-5@4', '-5: a'), ('0@9', '0: b'), ('5@14', '5: b')]}
    """
    window = _results_window(results)
    if not window.bounds:
        raise PipelineError(
            f"top after {results.name!r}: its window must give results with their window, "
            "window(..., bounds=True)"
        )
    if window.gap_ms:
        raise PipelineError(
            f"top after {results.name!r}: session windows are each key's own, so results of "
            "different keys share no window (top over them per key instead, "
            "window(gap_ms=..., bounds=True).top(...))"
        )
    top = _Top(n, by, ties, "top")
    key_by = graph.add(KeyByNode(_name(graph, results, "top", name), results, True, fn=_start))
    key_by.prune = top.bound  # each task ships only the results that may rank
    gather = aggregations.window(graph, key_by, 1, None, None, 0, None, bounds=False)
    kept = aggregations.aggregate(graph, gather, [], top.keep, top.merge, None, "checkpoint", None)
    return graph.add(FlatMapNode(graph.named(kept, FlatMapNode, None), kept, True, fn=_rows))


def _results_window(node: Node) -> WindowNode:
    """The window node whose results reach ``node`` (through filters only)."""
    at: Node | None = node
    while isinstance(at, FilterNode):
        at = at.parent
    if not isinstance(at, PerKeyNode) or at.window is None:
        raise PipelineError(
            f"top after {node.name!r}: top ranks the results of a windowed aggregation "
            "(window(..., bounds=True).count().top(...)), with nothing but filters between"
        )
    return at.window


class _Top:
    """The best ``n`` rows, best first (the largest ``by``; among equal ones the smallest
    JSON text first): rows tied with the n-th too with ``ties``, else exactly ``n``. The
    aggregate's ``add`` (`keep`) and ``merge``; its accumulator is such a list."""

    def __init__(self, n: Any, by: Any, ties: Any, where: str) -> None:
        if type(n) is not int or n < 1:
            raise PipelineError(f"{where}(n={n!r}): n must be a positive int")
        if type(ties) is not bool:
            raise PipelineError(f"{where}(ties={ties!r}): ties must be True or False")
        self.n, self.ties = n, ties
        self.by = check_callable(by, f"{where} by")

    def rank(self, rows: list[Any]) -> list[Any]:
        by, n = self.by, self.n
        scored = sorted(((by(row), _text(row), row) for row in rows), key=lambda s: s[1])
        scored.sort(key=lambda s: s[0], reverse=True)  # stable: equal scores by their text
        if len(scored) > n:
            if self.ties:
                cut = scored[n - 1][0]
                scored = [s for s in scored if not s[0] < cut]
            else:
                del scored[n:]
        return [row for _, _, row in scored]

    def bound(self, rows: list[Any]) -> list[Any]:
        """Of ``rows`` (results of one window), those the top may keep, in their order:
        all but the ones whose ``by`` is below the n-th largest here, which rank below n
        others over all rows too. All of them when the scores are not plain numbers, or
        all plain strings (no total order to rely on), or ``by`` raises (the top's own
        ranking makes that row dead)."""
        if len(rows) <= self.n:
            return rows
        try:
            scores = list(map(self.by, rows))
        except Exception:  # noqa: BLE001 - a user function's failure: the top's to report
            return rows
        kinds = set(map(type, scores))
        if not (kinds <= _NUMBERS or kinds == _TEXT) or any(s != s for s in scores):
            return rows  # a NaN, a bool, anything of its own order: the top ranks them all
        cut = sorted(scores, reverse=True)[self.n - 1]
        return [row for row, score in zip(rows, scores, strict=True) if not score < cut]

    def keep(self, best: list[Any], row: Any) -> list[Any]:
        """``best`` with ``row`` one more: unchanged at once if ``row`` ranks below the n-th
        (most rows, once a window has n)."""
        if len(best) >= self.n and self.by(row) < self.by(best[self.n - 1]):
            return best
        return self.rank([*best, row])

    def merge(self, best: list[Any], other: list[Any]) -> list[Any]:
        return self.rank([*best, *other])


_NUMBERS = frozenset({int, float})
_TEXT = {str}


def _text(row: Any) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"))


def _spread(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A window's kept values, each as a result of the window."""
    return [{**result, "value": value} for value in result["value"]]


def _start(result: dict[str, Any]) -> Any:
    return result["start"]


def _rows(rows: list[Any]) -> list[Any]:
    return rows


def _name(graph: Graph, parent: Node, label: str, name: str | None) -> str:
    """``name``, or ``<parent>.<label>`` (``-2``... for another of the same parent); checked."""
    if name is not None:
        return graph.named(parent, KeyByNode, name)
    base = f"{parent.name}.{label}"
    taken = {c.name for c in parent.children}
    count = 1
    while (f"{base}-{count}" if count > 1 else base) in taken:
        count += 1
    return graph.named(parent, KeyByNode, f"{base}-{count}" if count > 1 else base)
