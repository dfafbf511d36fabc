"""The coordinator's status page as HTML, from a status document: what an operator sees first."""

from __future__ import annotations

import pytest

from processor.config import SettingsError, load_settings
from processor.coordinator.status.page import render_html


def _doc(**extra: object) -> dict[str, object]:
    return {
        "job": "wc",
        "checkpoints": {"history": [], "completed": 0, "failed": 0, "in_progress": []},
        "tasks": [
            {"task": "count-0", "state": "running"},
            {"task": "count-1", "state": "failed", "reason": "records_deleted: <x> & y"},
            {"task": "split-0", "state": "stopped", "reason": None},
        ],
        "workers": [],
        "stages": [],
        **extra,
    }


def test_failed_and_stopped_tasks_come_first() -> None:
    page = render_html(_doc())
    alert = page.index('<div class="alert">')
    assert alert < page.index("Job graph") < page.index("<h2>Tasks</h2>")
    assert "2 task(s) failed for good or stopped" in page
    assert "count-1: records_deleted: &lt;x&gt; &amp; y" in page  # escaped
    assert "split-0: stopped" in page
    assert '<div class="alert">' not in render_html(_doc(tasks=[]))


def test_a_grafana_link_only_when_set_and_only_http() -> None:
    assert 'href="https://grafana.example/d/processor"' in render_html(
        _doc(grafana_url="https://grafana.example/d/processor")
    )
    assert ">Grafana<" not in render_html(_doc())
    assert ">Grafana<" not in render_html(_doc(grafana_url="javascript:alert(1)"))


def test_the_setting_takes_only_a_web_address() -> None:
    assert load_settings(grafana_url="http://g:3000/d/x").grafana_url == "http://g:3000/d/x"
    with pytest.raises(SettingsError, match="invalid setting --grafana-url"):
        load_settings(grafana_url="javascript:alert(1)")


def test_a_stage_shows_its_records_per_second_and_how_busy_its_tasks_were() -> None:
    """Busy: the task threads' CPU time between the last two checkpoints over that time,
    averaged over the stage's tasks (from the acks: read once a checkpoint, not per batch)."""
    from processor.api.streams import Pipeline
    from processor.coordinator.status.document import _stage_rates
    from processor.coordinator.status.svg import job_graph
    from processor.jobs.graph import JobGraph
    from processor.plan.stages import plan

    p = Pipeline(name="busy")
    p.source("in", value="text").key_by(lambda w: w).count().sink("out")
    graph = JobGraph("busy", plan(p))
    source, keyed = (s.name for s in graph.stages)
    before = {"completed_at": 100.0, "tasks": {}}
    last = {
        "completed_at": 102.0,
        "tasks": {
            f"{source}-0": {"records_in": 4000, "busy_cpu_s": 1.0},
            f"{source}-1": {"records_in": 2000, "busy_cpu_s": 0.6},
            f"{keyed}-0": {"records_in": 600},  # an older worker's ack: no busy time
        },
    }
    rates, busy = _stage_rates(graph, [before, last])
    assert rates == {source: 3000.0, keyed: 300.0}
    assert busy == {source: 0.4}
    svg = job_graph(
        [
            {"stage": source, "kind": "source", "records_per_s": 3000.0, "busy": 0.4},
            {"stage": keyed, "kind": "keyed", "upstreams": [source], "records_per_s": 300.0},
        ]
    )
    assert "3.0k records/s · busy 40%" in svg and "300 records/s<" in svg
