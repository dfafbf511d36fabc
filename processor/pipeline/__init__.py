"""Pipelines users write: the API (`api`), its stages (`plan`), loading (`load`), and a direct
in-memory execution that defines the expected result (`reference`)."""

from processor.pipeline.api import KeyedStream, Pipeline, PipelineError, Stream

__all__ = ["KeyedStream", "Pipeline", "PipelineError", "Stream"]
