"""What a user sees of a task's dead records in its log: the first ``FIRST`` of each operator
in full (the error, where the record was read, a user function's traceback), then one line a
minute per operator with how many more came.

Pure (the caller passes the clock), so the rate limit is unit-tested without waiting.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from processor.engine.dead import Position
from processor.serde.codec import RecordError

log = logging.getLogger("processor.worker.deadletter")

FIRST = 10  # dead records logged in full, per operator and task
REPORT_EVERY_S = 60.0  # then one line per operator at most this often
TRACEBACK_BYTES = 4096  # of a traceback in a DLQ header


_Trace = tuple[type[BaseException], BaseException, TracebackType | None]
_ENGINE = str(Path(__file__).resolve().parent.parent / "engine")  # processor/engine/


def user_error(exc: BaseException | None) -> _Trace | None:
    """``exc`` as logging's ``exc_info`` if it is a user function's failure, whose traceback
    says where it failed; None for the engine's own refusals (RecordError: not JSON, too
    deep...), which say all in their message.

    The traceback starts at the user's code: the engine's frames that called it are left
    out, and so is the batch's first failure, which the engine caught before it ran the
    records one at a time (the implicit context of this one).
    """
    if exc is None or isinstance(exc, RecordError):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _engine(tb):
        tb = tb.tb_next
    context = exc.__context__
    if context is not None and context.__traceback__ is not None and _engine(context.__traceback__):
        exc.__suppress_context__ = True  # raised up into the engine: not the user's
    return type(exc), exc, tb


def _engine(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_ENGINE)


def traceback_text(trace: _Trace, limit: int = TRACEBACK_BYTES) -> bytes:
    """A user function's traceback (`user_error`) as Python prints it, in UTF-8, at most
    ``limit`` bytes: past that, its first line and its end (the innermost frames and the
    error), which say the most.

    Formatted here, when a dead record is written, from the exception's ``__traceback__``:
    building a dead record costs no formatting.
    """
    kind, exc, tb = trace
    try:
        text = "".join(traceback.format_exception(kind, exc, tb))
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ fails
        text = "".join(traceback.format_tb(tb)) + f"{kind.__name__}\n"
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= limit:
        return raw
    head = b"Traceback (most recent call last):\n  ...\n"
    tail = raw[len(raw) - (limit - len(head)) :]
    # Start the tail at a line, and never inside a UTF-8 sequence.
    cut = tail.find(b"\n")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut + 1 :]
    return head + tail


@dataclass
class _Operator:
    seen: int = 0  # dead records so far
    held: int = 0  # since the last line about them
    reported_at: float = 0.0  # when that line was
    last: str = ""  # the error of the latest held one


class FailureLog:
    """One task's dead records, logged per operator (see the module's docstring)."""

    def __init__(
        self,
        task: str,
        dlq: str,
        clock: Callable[[], float] = time.monotonic,
        first: int = FIRST,
        every_s: float = REPORT_EVERY_S,
    ) -> None:
        self.task = task
        self.dlq = dlq
        self._clock = clock
        self._first = first
        self._every_s = every_s
        self._operators: dict[str, _Operator] = {}

    def note(
        self,
        operator: str,
        reason: str,
        error: str,
        exc: BaseException | None,
        where: Position | None,
    ) -> None:
        """One more dead record of ``operator``."""
        op = self._operators.get(operator)
        if op is None:
            op = self._operators[operator] = _Operator()
        op.seen += 1
        if op.seen <= self._first:
            op.reported_at = self._clock()
            log.warning(
                "%s: a dead record (%s at %s) from %s into %s: %s%s",
                self.task,
                reason,
                operator,
                where or "an unknown position",
                self.dlq,
                error,
                f" (the first {self._first} of an operator are logged, then a line a minute)"
                if op.seen == self._first
                else "",
                exc_info=user_error(exc),
            )
            return
        op.held += 1
        op.last = f"{reason}: {error}"
        self._report(operator, op, self._clock())

    def tick(self) -> None:
        """Say how many came, of an operator whose last line is a minute old (the task calls
        this now and then, so that the count is told also when the dead records stop)."""
        if not self._operators:
            return
        now = self._clock()
        for operator, op in self._operators.items():
            if op.held:
                self._report(operator, op, now)

    def _report(self, operator: str, op: _Operator, now: float) -> None:
        if now - op.reported_at < self._every_s:
            return
        log.warning(
            "%s: %d more dead records at %s into %s (%d in all); the last: %s",
            self.task,
            op.held,
            operator,
            self.dlq,
            op.seen,
            op.last,
        )
        op.held = 0
        op.reported_at = now
