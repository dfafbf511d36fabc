"""processor.api.ops: key texts (a key's identity in shuffles and state) and stored values
read back: the same key or value as the standard library's JSON gives, on the fast paths too,
and the same refusal for text no key_text or sink_value wrote (a forged internal record)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from processor.api.ops import key_of, key_text, load_value
from processor.serde.codec import sink_value

KEYS: list[Any] = [
    "a", "", "1", "\0x", 0, 1, 7, 10, 1234567890123, 10**30, 10**4000, -1, -0, 1.5, -2.0,
    True, False, None, [1, "a"], {"b": 1, "a": [2]}, "ünï", "\U0001f600",
]  # fmt: skip


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_a_key_comes_back_from_its_text_as_itself(key: Any) -> None:
    back = key_of(key_text(key))
    assert back == key and type(back) is type(key)


# What no key_text writes, as forged shuffle records or state may hold them: key_of answers
# as json.loads does, with the value or the error.
FORGED = ["01", "00", "0", "1 ", " 1", "+1", "1_000", "١٢", "²", "1e3", "-", "", "9" * 5000]


@pytest.mark.parametrize("body", FORGED)
def test_a_forged_key_text_reads_as_json_loads_reads_it(body: str) -> None:
    try:
        expected: Any = json.loads(body)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            key_of("\0" + body)
        return
    got = key_of("\0" + body)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "value", [0, -3, 10**30, "s", 1.25, None, True, [1, [2, {"x": None}]], {"a": "ü"}], ids=repr
)
def test_a_stored_value_comes_back_as_itself(value: Any) -> None:
    back = load_value(sink_value(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("depth", [500, 980])
def test_a_deep_stored_value_reads_back_as_the_standard_library_reads_it(depth: int) -> None:
    value = load_value(b"[" * depth + b"]" * depth)  # orjson reads up to 1024 levels
    levels = 1
    while value:
        assert type(value) is list and len(value) == 1
        value, levels = value[0], levels + 1
    assert value == [] and levels == depth


def test_a_stored_value_too_deep_for_the_standard_library_is_refused_as_it_refuses() -> None:
    with pytest.raises(RecursionError):
        load_value(b"[" * 3000 + b"]" * 3000)
