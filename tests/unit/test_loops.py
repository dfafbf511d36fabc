"""Loops (`KeyedStream.iterate`): the graph and its refusals, the connected-components
example against a union-find, and a "retry until done" loop, all run by `processor.testing`
(the engine's stage code)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.plan.stages import plan
from processor.testing import Driver, run
from tests.loopcheck import check_components, random_edges

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "components.py"


def components_pipeline() -> Pipeline:
    build = runpy.run_path(str(EXAMPLE))["build"]
    return build()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("partitions", "every"), [(1, 50), (3, 100), (4, 7)])
def test_components_match_a_union_find(partitions: int, every: int) -> None:
    edges = random_edges(600, 900, seed=partitions)
    out = run(components_pipeline(), {"edges": edges}, every, partitions, source_partitions=2)
    assert check_components(out["components"], edges) > 600


def test_a_round_is_a_checkpoint() -> None:
    """A label goes one hop per checkpoint: on a path 0-1-2-3 built from its far end, vertex
    3 learns label 0 three checkpoints after the last edge."""
    d = Driver(components_pipeline(), partitions=2)
    for u, v in [(2, 3), (1, 2), (0, 1)]:
        d.send("edges", {"u": u, "v": v})
    d.checkpoint()
    rounds = 0
    while (
        any(c == 0 for k, v in d.output("components") if k == "3" for c in [v["component"]])
        is False
    ):
        assert d.in_flight, "the loop settled before vertex 3 had label 0"
        d.checkpoint()
        rounds += 1
    assert rounds >= 2
    d.finish()
    assert d.in_flight == 0
    check_components(d.output("components"), [{"u": 0, "v": 1}, {"u": 1, "v": 2}, {"u": 2, "v": 3}])


def countdown(partitions: int) -> Pipeline:
    """Retry until done: each job goes round until its tries are used up."""
    p = Pipeline()

    def body(jobs: Any) -> tuple[Any, Any]:
        def attempt(job: dict[str, Any], state: Any) -> list[dict[str, Any]]:
            state.set((state.get() or 0) + 1)  # attempts of this key
            left = job["left"] - 1
            return [{"id": job["id"], "left": left, "attempts": state.get()}]

        tried = jobs.process(attempt)
        again = tried.filter(lambda j: j["left"] > 0).key_by(lambda j: j["id"])
        return again, tried.filter(lambda j: j["left"] == 0)

    (
        p.source("jobs", value="json")
        .key_by(lambda j: j["id"])
        .iterate(body, name="retries")
        .sink("done")
    )
    return p


def test_retry_until_done_goes_round_exactly_as_often_as_asked() -> None:
    jobs = [{"id": f"j{i}", "left": 1 + i % 5} for i in range(40)]
    out = run(countdown(3), {"jobs": jobs}, checkpoint_every=9, partitions=3)
    got = {k: v for k, v in out["done"]}
    assert got == {j["id"]: {"id": j["id"], "left": 0, "attempts": j["left"]} for j in jobs}


def test_the_plan_of_a_loop() -> None:
    planned = plan(countdown(1))
    stages = planned.stages
    assert [s.name for s in stages] == ["jobs", "jobs.key_by"]
    loop_stage = stages[1]
    assert loop_stage.loop is not None and loop_stage.loop.name == "retries"
    assert loop_stage.feedback is not None and loop_stage.feedback.feeds is loop_stage.loop
    assert loop_stage.shuffles == []  # the feedback is not a shuffle of another stage
    assert planned.target(loop_stage.feedback) is loop_stage
    assert planned.loops == [loop_stage]


def _keyed(p: Pipeline) -> Any:
    return p.source("in", value="json").key_by(lambda v: v["k"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (lambda s: (s.map(lambda v: v), s), "must be a keyed stream|own key_by"),
        (lambda s: (s.process(lambda v, st: [v]), s), "must end in its own key_by"),
        (
            lambda s: (s.key_by(lambda v: v).map(lambda v: v).key_by(lambda v: v), s),
            "runs in one stage",
        ),
        (lambda s: (s.key_by(lambda v: v).count(), s), "must end in its own key_by"),
        (lambda s: s, "must return \\(feedback, output\\)"),
        (lambda s: (s.key_by(lambda v: v), 3), "output must be a stream"),
    ],
)
def test_a_loop_that_cannot_run_is_refused_in_one_line(body: Any, message: str) -> None:
    p = Pipeline()
    with pytest.raises(PipelineError, match=message) as info:
        _keyed(p).iterate(body)
    assert "\n" not in str(info.value)


def test_feedback_or_output_not_from_the_loop_is_refused() -> None:
    p = Pipeline()
    other = p.source("other", value="json").key_by(lambda v: v)
    with pytest.raises(PipelineError, match="not downstream of the loop"):
        _keyed(p).iterate(lambda s: (other, s))
    p = Pipeline()
    unkeyed = p.source("other", value="json")
    with pytest.raises(PipelineError, match="output is not downstream"):
        _keyed(p).iterate(lambda s: (s.key_by(lambda v: v), unkeyed))


def test_event_time_and_metadata_in_a_loop_stage_are_refused() -> None:
    p = Pipeline()
    looped = _keyed(p).iterate(lambda s: (s.key_by(lambda v: v), s))
    looped.sink("out")
    p.source("in2", value="json").key_by(lambda v: v).window(size_ms=10).count().sink("w")
    with pytest.raises(PipelineError, match="event time"):
        plan(p)
    p = Pipeline()
    looped = _keyed(p).iterate(
        lambda s: (s.filter(lambda v, m: True, meta=True).key_by(lambda v: v), s)
    )
    looped.sink("out")
    with pytest.raises(PipelineError, match="metadata"):
        plan(p)


def test_feedback_topic_names_are_checked() -> None:
    p = Pipeline()
    fb = "y" * 10
    looped = _keyed(p).iterate(lambda s: (s.key_by(lambda v: v, name=fb), s), name="x" * 200)
    looped.sink("out", name="out")
    with pytest.raises(PipelineError, match="feedback topic of loop"):
        plan(p).check_topic_names("j" * 40)


def test_the_status_page_shows_a_loop_stage_and_its_feedback_topic() -> None:
    from processor.coordinator.status.document import _input, _kind
    from processor.jobs.graph import JobGraph

    graph = JobGraph("job", plan(countdown(1)))
    loop_stage = graph.stages[1]
    assert _kind(loop_stage) == "loop"
    assert _input(graph, loop_stage) == "job.jobs.key_by + job.retries.feedback (fed back)"
    assert graph.shuffle_topics == ["job.jobs.key_by", "job.retries.feedback"]


def test_the_status_page_draws_the_loop() -> None:
    from processor.coordinator.status.svg import checkpoint_chart, job_graph

    stages = [
        {"stage": "edges", "kind": "source", "tasks": 4, "upstreams": [], "records_per_s": 1200},
        {
            "stage": "by-vertex",
            "kind": "loop",
            "tasks": 8,
            "upstreams": ["edges"],
            "records_per_s": 34567.0,
            "lag": 12,
        },
    ]
    svg = job_graph(stages)
    assert svg.count("<rect") == 2 and svg.count("<line") == 1
    assert "feedback" in svg and "34.6k records/s" in svg and "8 tasks · lag 12" in svg
    hour = [
        {"at": 0.0, "completed": 1, "failed": 0, "duration_s": 0.4, "size_bytes": 3000},
        {"at": 30.0, "completed": 0, "failed": 1},
        {"at": 90.0, "completed": 1, "failed": 0, "duration_s": 0.2, "alignment_s": 0.1},
    ]
    chart = checkpoint_chart(hour)
    assert chart.count('class="duration"') == 2 and chart.count('class="failed"') == 1
    assert chart.count('class="alignment"') == 1
    assert "max 0.40 s" in chart and "max 3.0kB" in chart and "-2 min" in chart
