"""The jobs this build can run, by name (``PROCESSOR_JOB``)."""

from processor.jobs.graph import KeyedCountJob
from processor.jobs.wordcount import WORDCOUNT

JOBS: dict[str, KeyedCountJob] = {WORDCOUNT.name: WORDCOUNT}

__all__ = ["JOBS", "KeyedCountJob"]
