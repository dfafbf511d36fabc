"""The typed pipeline of tests/unit/typing_example.py runs as it type-checks: mypy (in the fast
tier) checks its types and the errors it must refuse; here the same pipeline runs."""

from __future__ import annotations

from processor.testing import run
from tests.unit.typing_example import build


def test_the_typed_example_runs() -> None:
    out = run(build(), {"lines": ["a bb a"], "clicks": [b"home,1", b"cart,3", b"home,12"]})
    assert out["shouts"] == [("a", "!!"), ("bb", "!")]
    assert out["length_sums"] == [("1", 2), ("0", 2)]
    assert out["mean_count_per_length"] == [("1", 2.0), ("2", 1.0)]
    assert out["tagged"] == [(None, "lines:a"), (None, "lines:bb"), (None, "lines:a")]
    assert out["first"] == [("home", "home first"), ("cart", "cart first")]
    assert sorted(out["per_window"]) == [("cart@0", 1), ("home@0", 1), ("home@10", 1)]
    assert sorted(out["window_sizes"]) == [("cart@0", 10), ("home@0", 10), ("home@10", 10)]
    assert sorted(out["hottest"]) == [("0@9", "cart"), ("0@9", "home"), ("10@19", "home")]
    assert out["latest"] == [("None@0", 3), ("None@10", 12)]
