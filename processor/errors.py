"""Errors every layer raises: defined below them all, so that a serde (below the pipeline API)
can refuse a pipeline too."""


class PipelineError(Exception):
    """A pipeline that cannot run; the message is one line naming the problem."""
