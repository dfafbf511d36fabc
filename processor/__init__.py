"""Exactly-once stream processing on Kafka. Users import `Pipeline` from here."""

from processor.pipeline.api import KeyedStream, Pipeline, PipelineError, Stream

__all__ = ["KeyedStream", "Pipeline", "PipelineError", "Stream"]
