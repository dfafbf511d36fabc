"""Word count's key-count sweep: its words, key spaces and distributions."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.harness import keyspace


def test_words_are_the_ranks_in_hex() -> None:
    assert [keyspace.word(r) for r in (0, 9, 10, 255)] == ["k0", "k9", "ka", "kff"]


def test_a_uniform_pool_touches_most_of_its_key_space() -> None:
    pool = keyspace.pool(10_000, "uniform", lines=2_500)
    assert len(pool) == 2_500
    assert all(len(line.split()) == keyspace.WORDS_PER_LINE for line in pool)
    assert 8_000 < keyspace.distinct(pool) <= 10_000  # 20,000 draws of 10,000 keys: ~86 %
    assert keyspace.pool(10_000, "uniform", lines=2_500) == pool  # seeded


def test_a_zipf_pool_is_skewed_to_the_first_ranks() -> None:
    words = Counter(w for line in keyspace.pool(100_000, "zipf", lines=5_000) for w in line.split())
    top = sum(words[keyspace.word(r)] for r in range(10))
    # P(rank < 10) = ln 10 / ln 100,000 = 0.2 under Zipf's law with s = 1
    assert 0.17 < top / sum(words.values()) < 0.23
    assert max(int(w[1:], 16) for w in words) < 100_000


def test_pool_sizes_and_refusals() -> None:
    assert keyspace.pool_lines(10_000) == 300_000
    assert keyspace.pool_lines(10_000_000) == 2_500_000
    with pytest.raises(ValueError):
        keyspace.pool(0, "uniform")
    with pytest.raises(ValueError):
        keyspace.pool(10, "pareto")
