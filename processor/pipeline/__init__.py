"""Pipelines users write: the API (`api`), its stages (`plan`), loading (`load`), and a direct
the expected output of an input in the form the engine tests compare (`reference`, by
`processor.testing`)."""

from processor.pipeline.api import KeyedStream, Pipeline, PipelineError, Stream

__all__ = ["KeyedStream", "Pipeline", "PipelineError", "Stream"]
