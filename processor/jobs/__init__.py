"""The job a process runs: the pipeline of ``PROCESSOR_PIPELINE``, or the built-in word count."""

from __future__ import annotations

from processor.config import Settings
from processor.jobs.graph import JobGraph, TaskId
from processor.jobs.wordcount import wordcount_pipeline
from processor.plan.load import load_pipeline, pipeline_job_name
from processor.plan.stages import plan


def load_graph(settings: Settings) -> JobGraph:
    """The job's graph; PipelineError (one line) if the pipeline cannot run."""
    if settings.pipeline:
        _, stages = load_pipeline(settings.pipeline)
    else:
        stages = plan(
            wordcount_pipeline(settings.job_name, settings.input_topic, settings.output_topic)
        )
    stages.check_topic_names(settings.job_name)
    return JobGraph(settings.job_name, stages)


def default_job_name(settings: Settings) -> str:
    """The job's name when ``PROCESSOR_JOB_NAME`` is not set: the pipeline's (its
    ``Pipeline(name=...)`` or its file's stem), so that two pipelines never share internal
    topics by accident; ``wordcount`` for the built-in word count."""
    return pipeline_job_name(settings.pipeline) if settings.pipeline else "wordcount"


__all__ = ["JobGraph", "TaskId", "default_job_name", "load_graph"]
