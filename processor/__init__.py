"""Exactly-once stream processing on Kafka. Users import `Pipeline` from here."""

from processor.pipeline.api import KeyedStream, Pipeline, PipelineError, Stream
from processor.pipeline.meta import Meta

__all__ = ["KeyedStream", "Meta", "Pipeline", "PipelineError", "Stream"]
