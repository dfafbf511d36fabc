"""Word count's key-count sweep (issue #42): input lines whose words come from a key space of a
chosen size, uniform or Zipf, so that state outgrows the caches and combining stops paying.

The corpus the other phases use has a small live vocabulary (26,542 distinct words, 59 % of
occurrences on the top 100): every engine's combiner and cache fold most of it away. Here the
words are ``k<rank in hex>`` over ``keys`` ranks:

- ``uniform``: every rank equally likely;
- ``zipf``: rank r with probability about 1 / (r ln keys) (Zipf's law with s = 1), drawn by
  the inverse of its continuous distribution, r = ceil(keys ** u) for u uniform in [0, 1).

The load generator (`bench.harness.loadgen`) draws lines from a pool, so the pool decides
which keys occur: `pool` makes ``lines`` lines of ``words`` words each, and `distinct` says
how many keys the pool really holds (about 63 % of the key space for a uniform pool with as
many words as keys; the report says the number).
"""

from __future__ import annotations

import math
import random

DISTRIBUTIONS = ("uniform", "zipf")
WORDS_PER_LINE = 8


def word(rank: int) -> str:
    """The word of a rank: ``k`` and the rank in hex (k0, k1, ... kf, k10, ...)."""
    return f"k{rank:x}"


def pool_lines(keys: int) -> int:
    """Lines in a pool for a key space: enough words to touch most of it (twice as many
    words as keys), at least 300,000 lines as the corpus' pool, at most 2,500,000."""
    return max(300_000, min(2_500_000, 2 * keys // WORDS_PER_LINE))


def pool(keys: int, distribution: str, lines: int | None = None, seed: int = 2) -> list[str]:
    """``lines`` lines of `WORDS_PER_LINE` words from a key space of ``keys`` ranks."""
    if keys < 1 or distribution not in DISTRIBUTIONS:
        raise ValueError(f"keys >= 1 and a distribution of {DISTRIBUTIONS}")
    rng = random.Random(seed)
    count = lines if lines is not None else pool_lines(keys)
    uniform = rng.random
    n = WORDS_PER_LINE
    if distribution == "uniform":
        ranks = (int(uniform() * keys) for _ in range(count * n))
    else:
        log_keys = math.log(keys)
        exp, ceil = math.exp, math.ceil
        ranks = (min(keys, ceil(exp(uniform() * log_keys))) - 1 for _ in range(count * n))
    words = [f"k{r:x}" for r in ranks]
    return [" ".join(words[i : i + n]) for i in range(0, len(words), n)]


def distinct(lines: list[str]) -> int:
    """Distinct words in a pool: the keys a run can touch."""
    return len({w for line in lines for w in line.split()})
