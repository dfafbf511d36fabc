"""Word count: the words of each line, lower-cased, as ``re.findall(r"\\w+", line.lower())``."""

from __future__ import annotations

import re

from processor.jobs.graph import KeyedCountJob

_WORD = re.compile(r"\w+")


def words(lines: list[str]) -> list[str]:
    # One regex pass over the whole batch: \w never matches the newline that joins the lines.
    return _WORD.findall("\n".join(lines).lower())


WORDCOUNT = KeyedCountJob(name="wordcount", extract=words)
