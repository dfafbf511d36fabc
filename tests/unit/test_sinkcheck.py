from __future__ import annotations

from tests.reference import SinkOutput
from tests.sinkcheck import check_sink


def counts(key: bytes, *values: int) -> list[tuple[bytes | None, bytes]]:
    return [(key, str(v).encode()) for v in values]


def reference_counts(**finals: int) -> SinkOutput:
    out = SinkOutput(changelog=True)
    for key, n in finals.items():
        out.records += counts(key.encode(), *range(1, n + 1))
    return out


def test_a_changelog_with_one_update_per_checkpoint_is_exact() -> None:
    got = counts(b"a", 2, 5) + counts(b"b", 1)
    check = check_sink(reference_counts(a=5, b=1), got)
    assert check.exact
    assert (check.records, check.keys) == (3, 2)


def test_changelog_counts_short_beyond_repeated_and_unknown() -> None:
    assert check_sink(reference_counts(a=5), counts(b"a", 2, 3)).lost == 2
    assert check_sink(reference_counts(a=5), []).lost == 5
    assert check_sink(reference_counts(a=5), counts(b"a", 3, 3, 5)).duplicated == 1
    assert check_sink(reference_counts(a=5), counts(b"a", 4, 2, 7)).duplicated == 1 + 2
    assert check_sink(reference_counts(a=1), counts(b"a", 1) + counts(b"z", 1)).unknown == 1


def test_order_dependent_changelog_values_compare_only_the_final_one() -> None:
    reference = SinkOutput(changelog=True, records=[(b"k", b'"x"'), (b"k", b'"xy"')])
    assert check_sink(reference, [(b"k", b'"y"'), (b"k", b'"xy"')]).exact
    assert check_sink(reference, [(b"k", b'"x"')]).wrong == 1
    assert check_sink(reference, []).lost == 1
    numeric = SinkOutput(changelog=True, records=[(b"k", b"3"), (b"k", b"1")])  # a sum
    assert check_sink(numeric, [(b"k", b"1")]).exact
    assert check_sink(numeric, [(b"k", b"2")]).wrong == 1


def test_other_sinks_compare_as_multisets() -> None:
    reference = SinkOutput(changelog=False, records=[(None, b"1"), (None, b"1"), (None, b"2")])
    assert check_sink(reference, [(None, b"2"), (None, b"1"), (None, b"1")]).exact
    check = check_sink(reference, [(None, b"1"), (None, b"2"), (None, b"2"), (None, b"9")])
    assert (check.lost, check.duplicated, check.unknown) == (1, 1, 1)
