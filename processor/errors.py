"""Errors every layer raises: defined below them all, so that a serde (below the pipeline API)
can refuse a pipeline too."""


class PipelineError(Exception):
    """A pipeline that cannot run; the message is one line naming the problem."""


class PermanentTaskFailure(Exception):
    """A failure no restart can fix: the task stops for good, its worker does not restart it.

    The message is the one line an operator reads (status page, log); ``reason`` labels
    the metric that counts these.
    """

    reason = "permanent"
    state = "failed"  # what the status page shows


class OutsideFailure(Exception):
    """A failure of something outside the job an operator fixes (a server's setting): the
    task fails and retries, and its message, one line, says it all (no traceback)."""


class SettingsError(Exception):
    """An invalid setting, described in one line that names it."""
