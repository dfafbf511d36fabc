"""The names of a job's own topics, in one place: ``<job>.<suffix>`` for the internal ones and
``<job>.<stage>`` for a keyed stage's shuffle.

>>> shuffle_topic("wc", "counts"), job_topic("wc", "control")
('wc.counts', 'wc.control')
"""

from __future__ import annotations

# The job's internal topics: no source, sink or shuffle may be one of them (a user's
# sink("<job>.control") would feed the coordinator records it cannot read).
CONTROL, CHECKPOINTS, DLQ, LATE = "control", "checkpoints", "dlq", "late"
INTERNAL_SUFFIXES = (CONTROL, CHECKPOINTS, DLQ, LATE)


def job_topic(job: str, suffix: str) -> str:
    """One of the job's internal topics (``suffix`` in `INTERNAL_SUFFIXES`)."""
    return f"{job}.{suffix}"


def shuffle_topic(job: str, stage: str) -> str:
    """The topic feeding keyed stage ``stage`` (unless the pipeline named another)."""
    return f"{job}.{stage}"


def feedback_topic(job: str, loop: str) -> str:
    """The topic a loop's records go round through (`processor.api.loops`)."""
    return f"{job}.{loop}.feedback"
