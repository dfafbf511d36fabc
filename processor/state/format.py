"""The layout of a keyed task's state, written into every snapshot's and savepoint's metadata:
keys ``<operator>\\0<key>``, JSON values. A snapshot without it, or with another, is of
another version, whose state would be misread."""

STATE_FORMAT = "pipeline-1"
