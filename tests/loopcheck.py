"""Loops under test: the connected components of examples/components.py and a "retry until
done" loop (tests/integration/retries_pipeline.py), their inputs, and the checks of their
committed output against a direct computation (a union-find; each job's tries).

The chaos run's loop variant (tests/chaos.py ``--loops``) runs both loops in one job
(`build`); the integration tests and tests/unit/test_loops.py use the checks alone."""

from __future__ import annotations

import itertools
import random
import runpy
from pathlib import Path
from typing import Any

from processor import Pipeline

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = ROOT / "examples" / "components.py"
RETRIES = ROOT / "tests" / "integration" / "retries_pipeline.py"


def random_edges(vertices: int, edges: int, seed: int) -> list[dict[str, int]]:
    rng = random.Random(seed)
    return [{"u": rng.randrange(vertices), "v": rng.randrange(vertices)} for _ in range(edges)]


def retry_jobs(count: int, seed: int) -> list[dict[str, Any]]:
    """Jobs of 1 to 8 tries each."""
    rng = random.Random(seed)
    return [{"id": f"job-{i}", "left": rng.randint(1, 8)} for i in range(count)]


def smallest_in_component(edges: list[dict[str, int]]) -> dict[int, int]:
    """Union-find: each vertex of an edge -> the smallest vertex id of its component."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in edges:
        a, b = find(e["u"]), find(e["v"])
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {v: find(v) for v in list(parent)}


def check_components(records: list[tuple[Any, Any]], edges: list[dict[str, int]]) -> int:
    """Each vertex: its first record is itself, its components strictly decrease (a repeat
    would be a duplicate), its last one is the smallest id of its component. ``records``:
    (key, value) in each vertex's order. Returns how many records there were."""
    per_vertex: dict[int, list[int]] = {}
    for key, value in records:
        assert key == str(value["vertex"]), (key, value)
        per_vertex.setdefault(value["vertex"], []).append(value["component"])
    want = smallest_in_component(edges)
    missing, extra = set(want) - set(per_vertex), set(per_vertex) - set(want)
    assert not missing and not extra, (sorted(missing)[:5], sorted(extra)[:5])
    for vertex, seen in per_vertex.items():
        assert seen[0] == vertex, (vertex, seen)
        assert all(a > b for a, b in itertools.pairwise(seen)), (vertex, seen)
        assert seen[-1] == want[vertex], (vertex, seen, want[vertex])
    return len(records)


def check_retries(done: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> int:
    """Each job done once, after exactly as many tries as it had."""
    got = sorted((d["id"], d["tries"]) for d in done)
    want = sorted((j["id"], j["left"]) for j in jobs)
    assert got == want, _first_difference(got, want)
    return len(done)


def _first_difference(got: list[Any], want: list[Any]) -> str:
    for g, w in itertools.zip_longest(got, want):
        if g != w:
            return f"got {g}, want {w} ({len(got)} against {len(want)} jobs done)"
    return ""


def build(
    edges: str = "edges", components: str = "components", jobs: str = "jobs", done: str = "done"
) -> Pipeline:
    """Both loops in one job: the chaos run's loop variant."""
    p = Pipeline()
    runpy.run_path(str(COMPONENTS))["components_of"](p, edges).sink(components)
    retries_body = runpy.run_path(str(RETRIES))["body"]
    keyed = p.source(jobs, value="json").key_by(lambda j: j["id"], name="by-job")
    keyed.iterate(retries_body, name="retries").sink(done)
    return p
