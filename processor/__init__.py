"""Exactly-once stream processing on Kafka. Users import `Pipeline` from here."""

from processor.api.streams import KeyedStream, Pipeline, PipelineError, Stream
from processor.engine.meta import Meta

__all__ = ["KeyedStream", "Meta", "Pipeline", "PipelineError", "Stream"]
