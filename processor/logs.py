"""Log lines of every processor process: text or JSON on stderr, named by the process."""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import sys


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers (PROCESSOR_LOG_FORMAT=json)."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "process": self.process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, name: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(name))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {name} %(name)s: %(message)s")
        )
    logging.basicConfig(level=level.upper(), handlers=[handler])
    dump_stacks_on_signal()


def dump_stacks_on_signal() -> None:
    """``kill -USR1 <pid>`` writes every thread's stack to stderr (the log), as ``jstack``
    does for a JVM: what a hung process is doing, without stopping it. A crash in native code
    (librdkafka, RocksDB) writes the stacks too, before the process dies."""
    try:
        faulthandler.enable(sys.stderr, all_threads=True)
        faulthandler.register(signal.SIGUSR1, sys.stderr, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError):  # stderr without a file (a test's capture)
        pass
