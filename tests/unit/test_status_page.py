"""The coordinator's status page as HTML, from a status document: what an operator sees first."""

from __future__ import annotations

import pytest

from processor.config import SettingsError, load_settings
from processor.runtime.status import render_html


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
