"""A job is named after its pipeline unless PROCESSOR_JOB_NAME says otherwise, so two pipelines
never share internal topics and consumer groups by accident."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from processor import Pipeline, PipelineError, cli
from processor.commands.base import command_settings

EXAMPLES = Path(__file__).parents[2] / "examples"

_BODY = 'p.source("in").map(str.upper).sink("out")\n'


def _job(monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    args: argparse.Namespace = cli.build_parser().parse_args(["worker", *argv])
    return command_settings(args).job_name


@pytest.fixture(autouse=True)
def _no_job_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCESSOR_JOB_NAME", raising=False)
    monkeypatch.delenv("PROCESSOR_PIPELINE", raising=False)


def test_the_file_stem_names_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _job(monkeypatch, "--pipeline", str(EXAMPLES / "clicks.py")) == "clicks"


def test_pipeline_name_wins_over_the_stem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "anything.py"
    path.write_text(f'from processor import Pipeline\np = Pipeline(name="pages")\n{_BODY}')
    assert _job(monkeypatch, "--pipeline", f"{path}:p") == "pages"


def test_a_stem_is_made_a_job_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "my.clicks v2.py"
    path.write_text(f"from processor import Pipeline\np = Pipeline()\n{_BODY}")
    assert _job(monkeypatch, "--pipeline", f"{path}:p") == "my-clicks-v2"


def test_processor_job_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCESSOR_JOB_NAME", "clicks-v2")
    assert _job(monkeypatch, "--pipeline", str(EXAMPLES / "clicks.py")) == "clicks-v2"


def test_the_built_in_word_count_is_wordcount(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _job(monkeypatch) == "wordcount"


@pytest.mark.parametrize("name", ["a.b", "", "-x", "x" * 101, 7])
def test_a_pipeline_name_must_be_a_job_name(name: object) -> None:
    with pytest.raises(PipelineError, match="Pipeline"):
        Pipeline(name=name)  # type: ignore[arg-type]
