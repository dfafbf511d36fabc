"""What a user sees of dead records: the log (the first 10 per operator and task in full, then
a line a minute), the DLQ record (its value, its headers, the traceback's cap) and
PROCESSOR_ON_ERROR=stop."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest

from processor import Pipeline
from processor.engine.chain import DeadRecord, StageChain
from processor.engine.dead import Position, dead_value
from processor.plan.stages import plan
from processor.worker.deadletter import DeadLetters, StoppedOnError
from processor.worker.failures import TRACEBACK_BYTES, traceback_text, user_error
from tests.unit.test_chain import DictBackend
from tests.unit.test_poison import _Msg, _Out

_LOGGER = "processor.worker.deadletter"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _letters(clock: _Clock, task: str = "count-0", on_error: str = "dlq") -> DeadLetters:
    return DeadLetters("job.dlq", task, {"job_name": "j", "task": task}, 1_000_000, on_error, clock)


def _failure(operator: str = "parse", value: Any = None) -> DeadRecord:
    record: dict[str, int] = {}
    try:
        record["ts"]  # the user's bug
    except KeyError as exc:
        return DeadRecord(operator, "KeyError: 'ts'", dead_value(value or {}), exc=exc)
    raise AssertionError


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    lines = [r for r in caplog.records if r.name == _LOGGER]
    caplog.clear()
    return lines


def test_the_first_ten_per_operator_and_task_are_logged_in_full_then_a_line_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    out: Any = _Out()
    letters = _letters(clock)
    at = Position("clicks", 2, 17)
    with caplog.at_level("WARNING", logger=_LOGGER):
        letters.failed(out, [_failure() for _ in range(10)], where=at)
        full = _lines(caplog)
        assert len(full) == 10
        assert all(r.exc_info is not None for r in full)  # the traceback, each time
        assert all("(function_error at parse) from clicks[2]@17" in r.getMessage() for r in full)
        assert "KeyError: 'ts'" in full[0].getMessage()

        clock.now += 30
        letters.failed(out, [_failure() for _ in range(5)], where=at)
        assert _lines(caplog) == []  # held: less than a minute since the last line
        # Another operator of the task has its own ten; so has another task.
        letters.failed(out, [_failure("enrich")], where=at)
        _letters(clock, task="count-1").failed(out, [_failure()])
        assert [r.exc_info is not None for r in _lines(caplog)] == [True, True]

        clock.now += 30  # a minute after the tenth
        letters.failed(out, [_failure()], where=at)
        (line,) = _lines(caplog)
        assert line.exc_info is None
        assert line.getMessage() == (
            "count-0: 6 more dead records at parse into job.dlq (16 in all); "
            "the last: function_error: KeyError: 'ts'"
        )
        clock.now += 59
        letters.failed(out, [_failure() for _ in range(3)], where=at)
        assert _lines(caplog) == []
        letters.tick()
        assert _lines(caplog) == []  # a tick says nothing before the minute is up
        clock.now += 1
        letters.tick()  # no more dead records came, and the count is still told
        (line,) = _lines(caplog)
        assert "3 more dead records at parse" in line.getMessage()
        clock.now += 600
        letters.tick()
        assert _lines(caplog) == []  # nothing new: nothing to say
    assert len(out.records) == 10 + 5 + 1 + 1 + 1 + 3  # every one written all the same


def test_a_dead_record_carries_its_json_and_says_where_and_why() -> None:
    clock = _Clock()
    fake = _Out()
    out: Any = fake
    letters = _letters(clock)
    keyed = _failure("totals", {"user": "u1", "n": [1, 2]})
    shuffle_position = Position("job.shuffle.by-user", 3, 120)
    letters.failed(out, [keyed, _failure("later")], where=shuffle_position)
    derived = DeadRecord("n.map", "not a number: sum of 'x'", b'"x"', "function_error")
    letters.failed(out, [derived], where=Position("clicks", 0))
    source = DeadRecord("clicks.map", "ZeroDivisionError: x", b"0", origin=0)
    msgs: list[Any] = [_Msg(b"0", b"k0", 9), _Msg(b"\xff", None, 10)]
    letters.failed(out, [source], msgs[:1].__getitem__)
    letters.source_record(out, msgs[1], "not UTF-8: x", "non_utf8", "clicks")

    (_, value, key, headers), *rest = fake.records
    assert (value, key) == (b'{"user":"u1","n":[1,2]}', None)
    assert list(headers) == [
        "operator",
        "task",
        "error",
        "traceback",
        "topic",
        "partition",
        "offset",
    ]
    assert headers["operator"] == b"totals" and headers["task"] == b"count-0"
    assert headers["error"] == b"KeyError: 'ts'"
    assert headers["traceback"].startswith(b"Traceback (most recent call last):\n")
    assert b"_failure" in headers["traceback"]  # the frame that raised
    assert headers["traceback"].endswith(b"KeyError: 'ts'\n")
    assert (headers["topic"], headers["partition"], headers["offset"]) == (
        b"job.shuffle.by-user",
        b"3",
        b"120",
    )
    assert rest[0][3]["operator"] == b"later"  # the same position: of the same batch here

    _, value, _, headers = rest[1]  # derived from an input record: its topic and partition
    assert value == b'"x"'
    assert headers["topic"] == b"clicks" and headers["partition"] == b"0"
    assert "offset" not in headers and "traceback" not in headers  # no exception kept

    _, value, key, headers = rest[2]  # still the input record: as it came
    assert (value, key) == (b"0", b"k0")
    assert (headers["topic"], headers["partition"], headers["offset"]) == (b"in", b"3", b"9")
    assert headers["operator"] == b"clicks.map"

    _, value, key, headers = rest[3]  # undecodable: at its source, no traceback
    assert (value, key) == (b"\xff", None)
    assert headers["operator"] == b"clicks" and headers["offset"] == b"10"
    assert "traceback" not in headers


def test_a_traceback_header_is_at_most_4_kb_and_keeps_the_failing_end() -> None:
    # 400 distinct frames (a recursion's repeated ones print as one line): about 14 KB.
    source = "".join(f"def f{i}():\n    return f{i + 1}()\n" for i in range(400))
    scope: dict[str, Any] = {}
    exec(compile(source + "def f400():\n    return 1 // 0\n", "user.py", "exec"), scope)
    try:
        scope["f0"]()
    except ZeroDivisionError as exc:
        error = exc
    full = "".join(traceback.format_exception(error)).encode()
    assert len(full) > 3 * TRACEBACK_BYTES
    trace = user_error(error)
    assert trace is not None
    text = traceback_text(trace)
    assert len(text) <= TRACEBACK_BYTES
    assert text.startswith(b"Traceback (most recent call last):\n  ...\n")
    assert text.endswith(b"ZeroDivisionError: integer division or modulo by zero\n")
    assert full.endswith(text.split(b"  ...\n", 1)[1])  # whole lines of the end
    fake = _Out()
    out: Any = fake
    dead = DeadRecord("f", "ZeroDivisionError: x", b"0", exc=error)
    _letters(_Clock()).failed(out, [dead])
    assert fake.records[0][3]["traceback"] == text  # the DLQ header: capped the same
    small = ValueError("é")
    assert traceback_text((ValueError, small, None)) == b"ValueError: \xc3\xa9\n"


def test_a_traceback_shows_the_users_code_not_the_engines_retry() -> None:
    """A map fails on a batch, then on its record alone: the DLQ traceback starts at the
    user's function and does not repeat the batch's failure as its context."""
    p = Pipeline()

    def tenth(v: int) -> int:
        return 10 // v

    p.source("n", value="json").map(tenth).sink("out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[0], 0, DictBackend(), {})
    chain.values([1, 0, 2])
    fake = _Out()
    out: Any = fake
    _letters(_Clock()).failed(out, chain.take_dead(), where=Position("n", 0))
    trace = fake.records[0][3]["traceback"]
    assert trace.startswith(b"Traceback (most recent call last):\n  File ")
    assert b"in tenth\n" in trace.splitlines(keepends=True)[1]  # the first frame: the user's
    assert b"During handling" not in trace and b"chain.py" not in trace
    assert trace.endswith(b"ZeroDivisionError: integer division or modulo by zero\n")


def test_dead_values_are_json_or_say_what_they_were() -> None:
    assert dead_value({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert dead_value("\ud800") == b'"\\ud800"'  # a lone surrogate, escaped: still JSON
    assert dead_value(b"\x00raw") == b"\x00raw"
    assert dead_value({1}) == b"{1}"
    nested: Any = []
    for _ in range(5000):
        nested = [nested]
    assert dead_value(nested) == b"<list nested too deeply to show>"


def test_the_chain_keeps_a_dead_records_json_and_formats_no_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    formatted: list[object] = []

    def counted(*args: object) -> list[str]:
        formatted.append(args)
        return []

    monkeypatch.setattr(traceback, "format_exception", counted)
    p = Pipeline()

    def add(acc: dict[str, int], v: dict[str, int]) -> dict[str, int]:
        return {"n": acc["n"] + v["n"]}  # a value without "n" raises

    p.source("n", value="json").key_by(lambda v: v["k"]).reduce(add).sink("out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[0], 0, DictBackend(), {"n.key_by": 1})
    chain.values([{"k": "a", "n": 1}, {"k": "a", "m": 2}, {"k": "a", "n": 3}])
    (dead,) = chain.take_dead()  # at the combiner, in the source stage
    assert (dead.operator, dead.value, dead.origin) == ("n.key_by.reduce", b'{"k":"a","m":2}', 1)
    assert dead.exc is not None and formatted == []  # formatted only if written or logged


def test_an_item_too_large_for_a_shuffle_record_is_dead_with_its_json() -> None:
    p = Pipeline()
    p.source("n", value="json").key_by(lambda v: v["k"]).map(lambda v: v).sink("out")
    compiled = plan(p)
    chain = StageChain(
        compiled, compiled.stages[0], 0, DictBackend(), {"n.key_by": 1}, max_record_bytes=2000
    )
    big = {"k": "a", "text": "é" * 1500}
    chain.values([{"k": "a", "n": 1}, big])
    chain.flush()
    assert len(chain.shuffles["n.key_by"].take(0)) == 1  # the small one
    (dead,) = chain.take_dead()
    assert dead.reason == "oversized_record" and dead.operator == "n.key_by"
    assert dead.value == dead_value(big) and dead.value.startswith(b'{"k":"a","text":"\xc3\xa9')


def test_on_error_stop_writes_nothing_logs_the_traceback_and_stops_the_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    fake = _Out()
    out: Any = fake
    letters = _letters(clock, on_error="stop")
    with caplog.at_level("ERROR", logger=_LOGGER), pytest.raises(StoppedOnError) as stopped:
        letters.failed(out, [_failure("parse", {"k": 1})], where=Position("job.shuffle.x", 1, 5))
    assert fake.records == []
    assert stopped.value.state == "stopped" and stopped.value.reason == "function_error"
    message = str(stopped.value)
    assert message.startswith(
        "a record of job.shuffle.x[1]@5 failed at parse (function_error): KeyError: 'ts' "
    )
    (line,) = _lines(caplog)
    assert line.levelname == "ERROR" and line.exc_info is not None
    assert line.getMessage() == f"count-0: {message}"
    with pytest.raises(StoppedOnError, match=r"a record of in\[3\]@4 failed at src \(not_json\)"):
        msg: Any = _Msg(b"{", None, 4)
        letters.source_record(out, msg, "not JSON: x", "not_json", "src")
    assert fake.records == []


class _StoppingTask:
    """What TaskRunner uses of a task, whose run() stops on a failing record."""

    def __init__(self, job: str) -> None:
        self.ctx = type("Ctx", (), {"task_id": "count-1"})()
        self.settings = type("S", (), {"job_name": job})()
        self.labels = {"job_name": job, "task": "count-1"}
        self.state = "running"
        self.last_checkpoint = 7

    def run(self) -> None:
        raise StoppedOnError("a record of t[0]@5 failed at parse (function_error): E", "not_json")


def test_a_task_stopped_on_a_record_is_reported_stopped_and_counted_in_a_gauge() -> None:
    from processor import metrics
    from processor.worker.service import TaskRunner

    job = f"stopping-{id(object())}"
    task: Any = _StoppingTask(job)
    runner = TaskRunner(task)
    runner.join(10)
    assert task.state == "stopped" and runner.permanent
    assert runner.error == "a record of t[0]@5 failed at parse (function_error): E"
    gauge = metrics.task_stopped.labels(job_name=job, task="count-1", reason="not_json")
    assert gauge._value.get() == 1
    metrics.forget_stopped(job, "count-1")
    samples = [s for f in metrics.task_stopped.collect() for s in f.samples]
    assert not [s for s in samples if s.labels["job_name"] == job]


def test_metadata_mode_keeps_where_and_why_but_no_byte_of_the_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PROCESSOR_DLQ_MODE=metadata: the DLQ says which record failed where and why, and
    keeps none of its bytes, nor the error's text (which quotes the record here)."""
    out: Any = _Out()
    letters = DeadLetters(
        "job.dlq",
        "count-0",
        {"job_name": "j", "task": "count-0"},
        1_000_000,
        clock=_Clock(),
        mode="metadata",
    )
    secret = b'{"card": "4111 1111 1111 1111"'
    msg: Any = _Msg(secret, b"alice", 41)
    letters.source_record(out, msg, f"not JSON: {secret!r}", "undecodable", "clicks")
    letters.failed(out, [_failure(value={"card": "4111"})], where=Position("clicks", 2, 17))
    (topic, value, key, headers), (_, value2, key2, headers2) = out.records
    assert topic == "job.dlq" and value == value2 == b"" and key is key2 is None
    assert headers == {
        "operator": b"clicks",
        "task": b"count-0",
        "reason": b"undecodable",
        "error": b"undecodable",
        "length": b"%d" % len(secret),
        "key.length": b"5",
        "topic": b"in",
        "partition": b"3",
        "offset": b"41",
    }
    assert headers2["error"] == b"KeyError" and "traceback" not in headers2
    assert headers2["offset"] == b"17"
    assert all(b"4111" not in v for h in (headers, headers2) for v in h.values())


def test_off_mode_writes_nothing_and_still_counts_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    out: Any = _Out()
    letters = DeadLetters(
        "job.dlq",
        "count-0",
        {"job_name": "j", "task": "count-0"},
        1_000_000,
        clock=_Clock(),
        mode="off",
    )
    with caplog.at_level("WARNING", logger=_LOGGER):
        letters.failed(out, [_failure()], where=Position("clicks", 2, 17))
    assert out.records == []
    assert len(_lines(caplog)) == 1
